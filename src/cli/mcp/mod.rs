//! `sandboxd mcp`: one session's tools served to an MCP client (a coding
//! agent) over stdio.
//!
//! By default it starts a private service inside this process, as `demo`
//! does (a random token only this process holds), and opens a session over
//! `--workspace` (default: the current directory), so an agent needs
//! nothing else running. The private service keeps its state in
//! `<state root>/mcp/<name>`, marked live by a lock the process holds;
//! each start first removes what dead ones left (containers, mounts,
//! state), however they died. With `--addr` it uses a running service
//! instead. The session lives while the client is connected (kept from its
//! idle timeout) and is closed when the client goes away or the process is
//! told to stop (SIGTERM, SIGINT, SIGHUP, SIGQUIT); an opening that hangs
//! (an engine that does not answer) is given up after a grace period.
//!
//! stdout carries the protocol and nothing else: the process's fd 1 is
//! pointed at stderr before anything starts, and the protocol writes to a
//! private copy of the original, so no stray print (ours or a helper
//! program's) can corrupt it.
//!
//! Plans and approvals: when the client can put a form to its user
//! (elicitation) and the token may decide, the person at the client
//! approves the session's plans and held calls (`approval`); otherwise the
//! session is created `unattended`, and whatever needs a person answers
//! APPROVAL_UNAVAILABLE at once. With `--attach` the session is as it was
//! made; it is only watched for approvals when the person can answer.
//!
//! `tools` holds the tools and their calls, `plan` the `submit_plan` tool,
//! `approval` the approver, `render` the text a model reads.

mod approval;
mod open;
mod oversized;
mod plan;
mod render;
mod tools;

use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;
use tokio::sync::watch;

use super::client::{SessionSpec, Target};
use super::{AnyError, connect, token};
use approval::Attendance;
use tools::{Refused, Session};

/// `sandboxd mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// Directory the session works in (default: the current directory).
    /// With --addr: a directory on the service's machine under a root it
    /// allows (default there: a fresh, empty workspace).
    #[arg(long, conflicts_with = "fresh")]
    workspace: Option<PathBuf>,
    /// Work in a fresh, empty workspace (removed at the end) instead of a
    /// directory.
    #[arg(long)]
    fresh: bool,
    /// With --addr: use this open session instead of a new one (it is left
    /// open at the end).
    #[arg(long, requires = "addr", conflicts_with_all = ["workspace", "fresh"])]
    attach: Option<String>,
    /// What the session runs and may do.
    #[command(flatten)]
    spec: SessionSpec,
    /// Private service only: container runtime, e.g. runsc for gVisor.
    #[arg(long)]
    container_runtime: Option<String>,
    /// Private service only: its name, which labels its containers
    /// `sandboxd.service=NAME` (default: sandboxd-mcp-<pid>).
    #[arg(long)]
    service_name: Option<String>,
}

/// Serves the tools until the client disconnects or SIGTERM / SIGINT, then
/// closes the session.
pub async fn run(
    args: McpArgs,
    target: &Target,
    token: Option<String>,
) -> Result<ExitCode, AnyError> {
    let protocol_out = claim_stdout()?;
    tracing_subscriber::fmt()
        .fmt_fields(super::logfmt::escaped())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let remote = target.given_addr().map(|addr| {
        // A token read from a state directory goes to its owner's service
        // alone, on every connection; one the user gave goes where told.
        let (token, trust) = match token {
            Some(t) => (Some(t), connect::Trust::anyone()),
            None => match token::found_token(addr) {
                Some(found) => (
                    Some(found.token),
                    connect::Trust::anyone().carrying_token_of(found.owner, &found.dir),
                ),
                None => (None, connect::Trust::anyone()),
            },
        };
        open::Remote {
            addr: addr.to_string(),
            ca_cert: target.ca_cert().map(Path::to_path_buf),
            token,
            trust,
        }
    });
    let workspace = match (&remote, &args.workspace, args.fresh) {
        (_, _, true) | (Some(_), None, _) => None,
        (_, Some(dir), _) => Some(absolute(dir)?),
        (None, None, false) => Some(std::env::current_dir()?),
    };
    let (ready_tx, ready) = watch::channel(None);
    // Whether a person is at the client is known once it initializes; the
    // session is created only then (the private service starts meanwhile).
    let (attendance_tx, attendance) = watch::channel(None);
    let instructions = instructions(workspace.as_deref(), &args);
    let opening = tokio::spawn(open::open(args, remote, workspace, ready_tx, attendance));

    let bridge = Bridge {
        ready: ready.clone(),
        instructions,
    };
    // Oversized lines are answered, not dropped (see `oversized`).
    let (to_transport, transport_in) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Err(e) =
            oversized::filter(tokio::io::stdin(), to_transport, oversized::MAX_LINE).await
        {
            tracing::warn!(error = %e, "reading the client's messages failed");
        }
    });
    let transport = (transport_in, tokio::fs::File::from_std(protocol_out));
    let mut stop = Stop::new()?;
    match bridge.serve(transport).await {
        Ok(running) => {
            let peer = running.peer().clone();
            let attending = Attendance::of(&peer);
            let _ = attendance_tx.send(Some(attending.clone()));
            let approver = tokio::spawn(approval::attend(ready, peer, attending));
            let cancel = running.cancellation_token();
            tokio::select! {
                quit = running.waiting() => tracing::info!(?quit, "the client went away"),
                () = stop.signalled() => cancel.cancel(),
            }
            approver.abort();
        }
        Err(e) => tracing::warn!(error = %e, "the client did not start the protocol"),
    }
    drop(attendance_tx);
    // An opening still under way (the first image build) may finish, so
    // that what it made is closed; one that hangs (an engine that does not
    // answer) is given up, and what it left is swept by the next start.
    let mut opening = opening;
    let backend = tokio::select! {
        opened = &mut opening => opened?,
        () = tokio::time::sleep(OPENING_GRACE) => {
            eprintln!("sandboxd: the session was still opening after {OPENING_GRACE:?}: given up");
            opening.abort();
            open::Backend::None
        }
        () = stop.signalled() => {
            opening.abort();
            open::Backend::None
        }
    };
    open::close(backend).await;
    Ok(ExitCode::SUCCESS)
}

/// How long an opening still under way at the end may take to finish.
const OPENING_GRACE: Duration = Duration::from_secs(20);

/// How long a tool call waits for the session to open (the first start
/// builds the sandbox image) before it is refused.
const OPENING_WAIT: Duration = Duration::from_secs(240);

/// The signals that end the server: SIGTERM, SIGINT, SIGHUP (the terminal
/// went away) and SIGQUIT.
struct Stop(Vec<tokio::signal::unix::Signal>);

impl Stop {
    fn new() -> std::io::Result<Stop> {
        use tokio::signal::unix::{SignalKind, signal};
        let kinds = [
            SignalKind::terminate(),
            SignalKind::interrupt(),
            SignalKind::hangup(),
            SignalKind::quit(),
        ];
        Ok(Stop(
            kinds.into_iter().map(signal).collect::<Result<_, _>>()?,
        ))
    }

    /// Waits for the next of them.
    async fn signalled(&mut self) {
        let waits = self.0.iter_mut().map(|s| Box::pin(s.recv()));
        futures_util::future::select_all(waits).await;
    }
}

/// Points fd 1 at stderr and returns a private copy of the original stdout
/// for the protocol (not inherited by child processes).
fn claim_stdout() -> std::io::Result<std::fs::File> {
    use std::io::Write;
    std::io::stdout().flush()?;
    let protocol = rustix::io::fcntl_dupfd_cloexec(std::io::stdout().as_fd(), 3)?;
    // SAFETY: dup2 on two open descriptors of this process; fd 1 stays
    // open throughout (atomically replaced).
    if unsafe { libc::dup2(std::io::stderr().as_raw_fd(), libc::STDOUT_FILENO) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(std::fs::File::from(protocol))
}

fn absolute(dir: &Path) -> std::io::Result<PathBuf> {
    Ok(std::env::current_dir()?.join(dir))
}

/// What the server tells the client at the start.
fn instructions(workspace: Option<&Path>, args: &McpArgs) -> String {
    let over = match workspace {
        Some(dir) => format!("the directory {}", dir.display()),
        None => "a workspace directory".to_string(),
    };
    let mut text = format!(
        "These tools work on {over}. File paths are relative to its root. Commands run in \
         a sandbox: a container with no network that sees only the workspace, mounted at \
         /workspace (their working directory). Edits are exact-match: old_string must \
         appear exactly once, or the edit is refused and the file is left unchanged; a \
         refusal's message says what to do next. A typical loop: run the tests, read the \
         code, edit it, run the tests again, then session_report. A call a rule holds waits \
         for a person's approval; a rejected call is not executed and its result says why. \
         Where nobody can approve, it is refused with APPROVAL_UNAVAILABLE: proceed on the \
         safest option and state your assumption."
    );
    if args.spec.read_only {
        text.push_str(
            " This session is read-only: writes and commands are refused, and no plan \
             changes that. Read, search and report what you find.",
        );
    } else if args.spec.plan_mode {
        text.push_str(
            " This session starts in plan mode (read-only): writes and commands are refused \
             until a plan is approved. Read what you need, then propose a plan with \
             submit_plan (goal, steps with the exact files each writes, a verification \
             command, risks); once it is approved you may write exactly the planned files, \
             then run the verification.",
        );
    }
    if !args.spec.deny_writes.is_empty() {
        text.push_str(&format!(
            " Writes to these paths are refused: {}.",
            args.spec.deny_writes.join(", ")
        ));
    }
    text
}

/// The MCP server: the tools of one session, which may still be opening.
struct Bridge {
    ready: open::Ready,
    instructions: String,
}

impl Bridge {
    /// The session, once it is open (or why it could not be).
    async fn session(&self) -> Result<Session, Refused> {
        let mut ready = self.ready.clone();
        let opened = tokio::time::timeout(OPENING_WAIT, ready.wait_for(Option::is_some)).await;
        match opened {
            Ok(Ok(opened)) => opened
                .clone()
                .map(|o| o.map(|o| o.session))
                .unwrap_or_else(|| Err(open::unavailable("it is gone"))),
            Ok(Err(_)) => Err(open::unavailable("the opening failed")),
            Err(_) => Err(Refused::new(
                "SANDBOX_UNAVAILABLE",
                format!(
                    "the session is still opening after {} s (building the sandbox image, or \
                     the Docker engine does not answer); nothing was done. Try again in a \
                     minute; if it persists, check `docker info`",
                    OPENING_WAIT.as_secs()
                ),
            )),
        }
    }
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("sandboxd", env!("CARGO_PKG_VERSION"))
                    .with_title("sandboxd: a sandbox for coding agents"),
            )
            .with_instructions(self.instructions.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::list()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::list().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == oversized::TOOL {
            let bytes = request
                .arguments
                .as_ref()
                .and_then(|a| a.get("bytes"))
                .and_then(serde_json::Value::as_u64)
                .unwrap_or_default();
            return Ok(result(Err(Refused::new(
                "ARGUMENT_TOO_LARGE",
                format!(
                    "the call's message was {bytes} bytes, over the {} MiB a message may be; \
                     it was not read and nothing was done. Send less in one call: write a \
                     large file in parts (create_file, then edit_file to append)",
                    oversized::MAX_LINE >> 20
                ),
            )))
            .into());
        }
        let arguments = request.arguments.unwrap_or_default();
        // A call the client cancels ends here: its request to the service
        // is dropped, which withdraws whatever of it waits for a person.
        let outcome = match self.session().await {
            Ok(session) => tokio::select! {
                outcome = tools::call(&session, &request.name, arguments, &context) => outcome,
                () = context.ct.cancelled() => Err(Refused::new(
                    "CANCELLED",
                    "the call was cancelled by the client",
                )),
            },
            Err(refused) => Err(refused),
        };
        Ok(result(outcome).into())
    }
}

/// A tool's outcome as MCP carries it: a refusal is an `isError` result
/// whose text starts with its reason, the reason and message also given as
/// structured content.
fn result(outcome: Result<tools::Reply, Refused>) -> CallToolResult {
    match outcome {
        Ok(reply) => {
            let content = vec![ContentBlock::text(reply.text)];
            let mut r = if reply.is_error {
                CallToolResult::error(content)
            } else {
                CallToolResult::success(content)
            };
            r.structured_content = reply.structured;
            r
        }
        Err(refused) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
                "refused [{}]: {}",
                refused.reason,
                render_message(&refused.message)
            ))]);
            r.structured_content = Some(json!({
                "reason": refused.reason,
                "message": refused.message,
            }));
            r
        }
    }
}

fn render_message(message: &str) -> String {
    crate::cli::terminal::neutralise(message).into_owned()
}
