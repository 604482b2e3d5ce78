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
mod plan;
mod render;
mod tools;

use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use sandboxd::local::Local;
use sandboxd::pb;
use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::state::StateDir;
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

/// Where the session lives, kept to close it at the end.
enum Backend {
    /// The private service: stopping it closes the session.
    Private(Local),
    /// A running service: the session is closed unless it was attached.
    Remote {
        client: connect::Client,
        close: Option<String>,
    },
    /// Nothing was opened.
    None,
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
    let remote = target.given_addr().map(|addr| Remote {
        addr: addr.to_string(),
        ca_cert: target.ca_cert().map(Path::to_path_buf),
        token: token.or_else(|| token::local_token(addr)),
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
    let opening = tokio::spawn(open(args, remote, workspace, ready_tx, attendance));

    let bridge = Bridge {
        ready: ready.clone(),
        instructions,
    };
    let transport = (tokio::io::stdin(), tokio::fs::File::from_std(protocol_out));
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
            Backend::None
        }
        () = stop.signalled() => {
            opening.abort();
            Backend::None
        }
    };
    close(backend).await;
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

/// A running service to use.
struct Remote {
    addr: String,
    ca_cert: Option<PathBuf>,
    token: Option<String>,
}

/// Opens the session and tells the bridge, which waits for it.
async fn open(
    args: McpArgs,
    remote: Option<Remote>,
    workspace: Option<PathBuf>,
    ready: watch::Sender<Option<Result<Session, Refused>>>,
    attendance: watch::Receiver<Option<Attendance>>,
) -> Backend {
    let (backend, session) = match remote {
        None => open_private(&args, workspace, attendance).await,
        Some(remote) => open_remote(&args, remote, workspace, attendance).await,
    };
    let session = session.inspect(|s| keep_alive(s.clone(), ready.clone()));
    if let Err(refused) = &session {
        tracing::error!(reason = %refused.reason, "{}", refused.message);
    }
    let _ = ready.send(Some(session));
    backend
}

/// The unavailable-sandbox refusal every tool gives when no session could
/// be opened.
fn unavailable(why: impl std::fmt::Display) -> Refused {
    Refused::new(
        "SANDBOX_UNAVAILABLE",
        format!("sandboxd could not open a session: {why}. No tool can work until it is fixed"),
    )
}

async fn open_private(
    args: &McpArgs,
    workspace: Option<PathBuf>,
    attendance: watch::Receiver<Option<Attendance>>,
) -> (Backend, Result<Session, Refused>) {
    let workspace = match workspace.map(std::fs::canonicalize).transpose() {
        Ok(w) => w,
        Err(e) => {
            return (
                Backend::None,
                Err(unavailable(format!("the workspace: {e}"))),
            );
        }
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return (Backend::None, Err(unavailable(e))),
    };
    let name = args
        .service_name
        .clone()
        .unwrap_or_else(|| format!("sandboxd-mcp-{}", std::process::id()));
    // Private services keep their state in one place, each marked live by
    // its process: what dead ones left (killed, the machine reset) is
    // removed first.
    let docker = Arc::new(DockerRuntime::new(None));
    let home = StateDir::default_root().join("mcp");
    for dead in sandboxd::local::sweep_dead(&home, Arc::clone(&docker)).await {
        eprintln!("sandboxd: removed what the dead private service {dead} left");
    }
    let builder = match Local::builder_in(&name, &home) {
        Ok(b) => b.docker(docker),
        Err(e) => return (Backend::None, Err(unavailable(e))),
    };
    let image = (!args.spec.image.is_empty()).then(|| args.spec.image.clone());
    let runtime = args.container_runtime.clone();
    let root = workspace.clone();
    eprintln!(
        "sandboxd: starting a private service (the first start builds the sandbox image, about a minute)"
    );
    let local = builder
        .supervisor(exe)
        .private()
        .configure(move |config| {
            config.allowed_roots = root.into_iter().collect();
            config.sandbox.pool_size = 0;
            config.default_ttl = config.max_ttl;
            config.sandbox.allowed_images.extend(image);
            config.sandbox.runtime = runtime;
        })
        .start()
        .await;
    let local = match local {
        Ok(local) => local,
        Err(e) => return (Backend::None, Err(unavailable(e))),
    };
    let client = local.client.clone();
    let attended = attended(&client, attendance).await;
    let session = create(client, args, workspace, attended).await;
    (Backend::Private(local), session)
}

async fn open_remote(
    args: &McpArgs,
    remote: Remote,
    workspace: Option<PathBuf>,
    attendance: watch::Receiver<Option<Attendance>>,
) -> (Backend, Result<Session, Refused>) {
    let client = match connect::client(&remote.addr, remote.ca_cert.as_deref(), remote.token).await
    {
        Ok(c) => c,
        Err(e) => return (Backend::None, Err(unavailable(e))),
    };
    if let Some(id) = &args.attach {
        let mut c = client.clone();
        let got = c
            .get_session(pb::GetSessionRequest {
                session_id: id.clone(),
            })
            .await;
        let session = got.map(|_| Session {
            client: client.clone(),
            id: id.clone(),
        });
        let backend = Backend::Remote {
            client,
            close: None,
        };
        return (backend, session.map_err(Refused::from));
    }
    let attended = attended(&client, attendance).await;
    let session = create(client.clone(), args, workspace, attended).await;
    let close = session.as_ref().ok().map(|s| s.id.clone());
    (Backend::Remote { client, close }, session)
}

/// Whether a person can answer for the session: the client can ask its
/// user (known once it initializes; a client gone before that cannot) and
/// the token may decide.
async fn attended(
    client: &connect::Client,
    mut attendance: watch::Receiver<Option<Attendance>>,
) -> bool {
    let elicits = match attendance.wait_for(Option::is_some).await {
        Ok(a) => a.as_ref().is_some_and(|a| a.elicits),
        Err(_) => false,
    };
    elicits && approval::can_decide(client).await
}

/// Opens the session the flags describe; `unattended` when nobody can
/// answer for it.
async fn create(
    client: connect::Client,
    args: &McpArgs,
    workspace: Option<PathBuf>,
    attended: bool,
) -> Result<Session, Refused> {
    let mut c = client.clone();
    let mut request = args.spec.request();
    request.workspace_path = workspace
        .map(|w| w.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Unattended when the flags say so, and whenever nobody can answer.
    request.unattended |= !attended;
    let unattended = request.unattended;
    let s = c.create_session(request).await?.into_inner();
    eprintln!(
        "sandboxd: session {} over {}{}",
        s.session_id,
        s.workspace_path,
        if !unattended {
            " (plans and held calls are put to the person at the client)"
        } else {
            " (unattended: nothing waits for a person)"
        }
    );
    for note in &s.notes {
        eprintln!("sandboxd: note: {note}");
    }
    Ok(Session {
        client,
        id: s.session_id,
    })
}

/// Keeps the session from its idle timeout while the client is connected
/// (it may think for a long time between calls); ends when the bridge does.
fn keep_alive(session: Session, ready: watch::Sender<Option<Result<Session, Refused>>>) {
    tokio::spawn(async move {
        let mut c = session.client.clone();
        loop {
            tokio::select! {
                () = ready.closed() => return,
                () = tokio::time::sleep(KEEP_ALIVE) => {}
            }
            let req = pb::GetSessionRequest {
                session_id: session.id.clone(),
            };
            if let Err(e) = c.get_session(req).await {
                tracing::warn!(error = %e, "the session could not be kept alive");
            }
        }
    });
}

/// How often the session is marked used: well inside any idle timeout a
/// service allows (a minute at least).
const KEEP_ALIVE: Duration = Duration::from_secs(20);

async fn close(backend: Backend) {
    match backend {
        Backend::Private(local) => {
            if let Err(e) = local.stop().await {
                eprintln!("sandboxd: the private service did not stop cleanly: {e}");
            }
        }
        Backend::Remote {
            mut client,
            close: Some(id),
        } => {
            let closed = client
                .close_session(pb::CloseSessionRequest { session_id: id })
                .await;
            if let Err(e) = closed {
                eprintln!("sandboxd: the session was not closed: {}", e.message());
            }
        }
        Backend::Remote { close: None, .. } | Backend::None => {}
    }
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
    ready: watch::Receiver<Option<Result<Session, Refused>>>,
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
                .unwrap_or_else(|| Err(unavailable("it is gone"))),
            Ok(Err(_)) => Err(unavailable("the opening failed")),
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
        let arguments = request.arguments.unwrap_or_default();
        let outcome = match self.session().await {
            Ok(session) => tools::call(&session, &request.name, arguments, &context).await,
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
