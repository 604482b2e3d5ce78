//! Opening the bridge's session, keeping it alive, and closing it at the
//! end: over a private service started in this process, or a running
//! service (`--addr`).
//!
//! The credential the bridge was given (the operator's token, or a private
//! service's) creates and closes the session and answers its approvals;
//! every tool call carries the session's own token, which the service
//! admits for that session alone. So confinement to the session rests on
//! the service, not on the bridge naming the right id.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sandboxd::local::Local;
use sandboxd::pb;
use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::state::StateDir;
use tokio::sync::watch;

use super::super::connect;
use super::McpArgs;
use super::approval::{self, Attendance};
use super::tools::{Refused, Session};

/// An open session: its tools' client, and the credential that answers
/// its approvals.
#[derive(Clone)]
pub struct Opened {
    /// The session, reached with its own token.
    pub session: Session,
    /// The bridge's own credential (the operator's, or a private
    /// service's): it lists and decides this session's approvals.
    pub approver: connect::Client,
}

/// What the bridge waits for: the session once it is open, or why it
/// could not be.
pub type Ready = watch::Receiver<Option<Result<Opened, Refused>>>;

/// Where the session lives, kept to close it at the end.
pub enum Backend {
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

/// A running service to use.
pub struct Remote {
    /// Its address.
    pub addr: String,
    /// The CA that signs its certificate (https).
    pub ca_cert: Option<PathBuf>,
    /// The bridge's credential there.
    pub token: Option<String>,
    /// Whose service its connections may reach (a token read from a
    /// state directory goes to that directory's owner alone, on every
    /// reconnection).
    pub trust: connect::Trust,
}

/// Opens the session and tells the bridge, which waits for it.
pub async fn open(
    args: McpArgs,
    remote: Option<Remote>,
    workspace: Option<PathBuf>,
    ready: watch::Sender<Option<Result<Opened, Refused>>>,
    attendance: watch::Receiver<Option<Attendance>>,
) -> Backend {
    let (backend, session) = match remote {
        None => open_private(&args, workspace, attendance).await,
        Some(remote) => open_remote(&args, remote, workspace, attendance).await,
    };
    let session = session.inspect(|s| keep_alive(s.session.clone(), ready.clone()));
    if let Err(refused) = &session {
        tracing::error!(reason = %refused.reason, "{}", refused.message);
    }
    let _ = ready.send(Some(session));
    backend
}

/// The unavailable-sandbox refusal every tool gives when no session could
/// be opened.
pub fn unavailable(why: impl std::fmt::Display) -> Refused {
    Refused::new(
        "SANDBOX_UNAVAILABLE",
        format!("sandboxd could not open a session: {why}. No tool can work until it is fixed"),
    )
}

async fn open_private(
    args: &McpArgs,
    workspace: Option<PathBuf>,
    attendance: watch::Receiver<Option<Attendance>>,
) -> (Backend, Result<Opened, Refused>) {
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
    let session = create(client, local.channel.clone(), args, workspace, attended).await;
    (Backend::Private(local), session)
}

async fn open_remote(
    args: &McpArgs,
    remote: Remote,
    workspace: Option<PathBuf>,
    attendance: watch::Receiver<Option<Attendance>>,
) -> (Backend, Result<Opened, Refused>) {
    let channel =
        match connect::connect_trusting(&remote.addr, remote.ca_cert.as_deref(), &remote.trust)
            .await
        {
            Ok(c) => c,
            Err(e) => return (Backend::None, Err(unavailable(e))),
        };
    let bearer = match sandboxd::local::Bearer::new(remote.token.as_deref()) {
        Some(b) => b,
        None => {
            return (
                Backend::None,
                Err(unavailable(
                    "the token has characters a header cannot carry",
                )),
            );
        }
    };
    let client = sandboxd::local::client(channel.clone(), bearer);
    if let Some(id) = &args.attach {
        let mut c = client.clone();
        let got = c
            .get_session(pb::GetSessionRequest {
                session_id: id.clone(),
            })
            .await;
        // An attached session is reached with the credential given for it.
        let session = got.map(|_| Opened {
            session: Session {
                client: client.clone(),
                id: id.clone(),
            },
            approver: client.clone(),
        });
        let backend = Backend::Remote {
            client,
            close: None,
        };
        return (backend, session.map_err(Refused::from));
    }
    let attended = attended(&client, attendance).await;
    let session = create(client.clone(), channel, args, workspace, attended).await;
    let close = session.as_ref().ok().map(|s| s.session.id.clone());
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
/// answer for it. Its tools are reached over `channel` with the session's
/// own token.
async fn create(
    client: connect::Client,
    channel: tonic::transport::Channel,
    args: &McpArgs,
    workspace: Option<PathBuf>,
    attended: bool,
) -> Result<Opened, Refused> {
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
    if attended {
        // Present for this session before any tool can ask for a person
        // (the watcher's long poll takes over once it starts).
        let listing = pb::ListPendingApprovalsRequest {
            wait_ms: 0,
            session_id: s.session_id.clone(),
        };
        if let Err(e) = c.list_pending_approvals(listing).await {
            tracing::warn!(error = %e.message(), "the approver could not be marked present");
        }
    }
    let tools = match s.session_token.as_str() {
        // A service that gives no session token: the bridge's own.
        "" => client.clone(),
        token => connect::with_token(channel, token).map_err(unavailable)?,
    };
    Ok(Opened {
        session: Session {
            client: tools,
            id: s.session_id,
        },
        approver: client,
    })
}

/// Keeps the session from its idle timeout while the client is connected
/// (it may think for a long time between calls); ends when the bridge does.
fn keep_alive(session: Session, ready: watch::Sender<Option<Result<Opened, Refused>>>) {
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

pub async fn close(backend: Backend) {
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn reason(status: &tonic::Status) -> String {
        use tonic_types::StatusExt;
        status
            .get_error_details()
            .error_info()
            .map(|i| i.reason.clone())
            .unwrap_or_default()
    }

    #[derive(Parser)]
    struct Flags {
        /// As the CLI's own flag, which `--attach` requires.
        #[arg(long)]
        addr: Option<String>,
        #[command(flatten)]
        mcp: McpArgs,
    }

    #[tokio::test]
    async fn tool_calls_carry_the_session_token_and_reach_no_other_session() {
        let local = Local::builder(&format!("mcp-open-{}", std::process::id()))
            .unwrap()
            .private()
            .configure(|config| config.sandbox.pool_size = 0)
            .start()
            .await
            .unwrap();
        let mut operator = local.client.clone();
        let other = operator
            .create_session(pb::CreateSessionRequest::default())
            .await
            .unwrap()
            .into_inner();
        let args = Flags::parse_from(["mcp"]).mcp;
        let opened = create(
            local.client.clone(),
            local.channel.clone(),
            &args,
            None,
            false,
        )
        .await
        .unwrap();
        let mut tools = opened.session.client.clone();
        let own = pb::GetSessionRequest {
            session_id: opened.session.id.clone(),
        };
        tools.get_session(own).await.expect("its own session");
        // The service itself refuses the bridge's client another session.
        let theirs = pb::ReadFileRequest {
            session_id: other.session_id.clone(),
            path: "x".into(),
            ..Default::default()
        };
        let refused = tools.read_file(theirs).await.unwrap_err();
        assert_eq!(reason(&refused), "SESSION_NOT_FOUND", "{refused:?}");
        let close = pb::CloseSessionRequest {
            session_id: other.session_id.clone(),
        };
        let refused = tools.close_session(close).await.unwrap_err();
        assert_eq!(reason(&refused), "SESSION_NOT_FOUND", "{refused:?}");
        let other = pb::GetSessionRequest {
            session_id: other.session_id.clone(),
        };
        operator.get_session(other).await.expect("still open");
        // Nor can it list or decide approvals: that is the bridge's own
        // credential's job, for its own session.
        let listing = pb::ListPendingApprovalsRequest::default();
        assert!(tools.list_pending_approvals(listing).await.is_err());
        local.stop().await.unwrap();
    }
}
