//! Command line: `serve` starts the service; client verbs call a running
//! service and print readable results. A refusal prints its reason and
//! message and exits non-zero.

use std::io::{IsTerminal, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use sandboxd::pb::{self, sandbox_client::SandboxClient};
use sandboxd::session::{Config, Registry};
use tonic::transport::Channel;
use tonic_types::StatusExt;

/// Exit code of a refused call or a failure to reach the service.
pub const EXIT_FAILURE: u8 = 1;

/// sandboxd: a sandbox service for coding agents.
#[derive(Debug, Parser)]
#[command(name = "sandboxd", version, about)]
pub struct Cli {
    /// Address of the service, for client verbs.
    #[arg(
        long,
        global = true,
        env = "SANDBOXD_ADDR",
        default_value = "http://127.0.0.1:50051"
    )]
    addr: String,
    /// Session to act on, for file verbs.
    #[arg(short, long, global = true, env = "SANDBOXD_SESSION")]
    session: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service.
    Serve(ServeArgs),
    /// Create, inspect, list and close sessions.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Print lines of a file, numbered.
    Read {
        /// Workspace-relative path.
        path: String,
        /// First line (1-based).
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Number of lines (0: server default).
        #[arg(long, default_value_t = 0)]
        limit: u64,
        /// Print the content only, without numbers or summary.
        #[arg(long)]
        raw: bool,
    },
    /// Create a new file from --content, --from or standard input.
    Create {
        /// Workspace-relative path.
        path: String,
        /// File content.
        #[arg(long, conflicts_with = "from")]
        content: Option<String>,
        /// Read the content from this local file.
        #[arg(long)]
        from: Option<PathBuf>,
    },
    /// Replace exact text in a file. Repeat --old/--new for several edits.
    Edit {
        /// Workspace-relative path.
        path: String,
        /// Exact text to replace.
        #[arg(long = "old", required = true)]
        old: Vec<String>,
        /// Replacement text (one per --old).
        #[arg(long = "new", required = true)]
        new: Vec<String>,
        /// Replace every occurrence.
        #[arg(long)]
        replace_all: bool,
        /// Refuse unless the file still has this sha256 (from `read`).
        #[arg(long)]
        expected_sha256: Option<String>,
    },
    /// List a directory.
    Ls {
        /// Workspace-relative directory.
        #[arg(default_value = "")]
        path: String,
    },
    /// Find files by glob.
    Find {
        /// Glob, e.g. "*.py" or "src/**/*.rs".
        pattern: String,
        /// Directory to search under.
        #[arg(long, default_value = "")]
        path: String,
        /// Maximum results (0: server default).
        #[arg(long, default_value_t = 0)]
        limit: u64,
    },
    /// Search file contents with a regular expression.
    Grep {
        /// Regular expression.
        pattern: String,
        /// Directory or file to search.
        #[arg(default_value = "")]
        path: String,
        /// Only files matching this glob.
        #[arg(long, default_value = "")]
        glob: String,
        /// Case-insensitive.
        #[arg(short = 'i', long)]
        ignore_case: bool,
        /// Maximum matches (0: server default).
        #[arg(long, default_value_t = 0)]
        limit: u64,
    },
}

#[derive(Debug, Subcommand)]
enum SessionCommand {
    /// Open a session; prints its id.
    Create {
        /// Existing host directory to work in (must be under an allowed root).
        #[arg(long)]
        workspace: Option<String>,
        /// Idle timeout in seconds (0: server default).
        #[arg(long, default_value_t = 0)]
        ttl: u64,
        /// Print only the session id.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Show a session (default: --session).
    Get {
        /// Session id.
        id: Option<String>,
    },
    /// List open sessions.
    List,
    /// Close a session (default: --session).
    Close {
        /// Session id.
        id: Option<String>,
    },
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "SANDBOXD_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Directory for fresh workspaces (default: <tmp>/sandboxd/workspaces).
    #[arg(long, env = "SANDBOXD_WORKSPACE_DIR")]
    workspace_dir: Option<PathBuf>,
    /// Existing directories under this root may be used as workspaces
    /// (repeatable, or comma-separated in the environment).
    #[arg(
        long = "allow-root",
        env = "SANDBOXD_ALLOW_ROOTS",
        value_delimiter = ','
    )]
    allow_roots: Vec<PathBuf>,
    /// Idle timeout of a session when the request gives none, in seconds.
    #[arg(long, env = "SANDBOXD_DEFAULT_TTL", default_value_t = 3600)]
    default_ttl: u64,
    /// Ceiling on a requested idle timeout, in seconds.
    #[arg(long, env = "SANDBOXD_MAX_TTL", default_value_t = 86400)]
    max_ttl: u64,
    /// Ceiling on open sessions.
    #[arg(long, env = "SANDBOXD_MAX_SESSIONS", default_value_t = 256)]
    max_sessions: usize,
    /// Largest file the file tools read, edit or create, in bytes.
    #[arg(long, env = "SANDBOXD_MAX_FILE_BYTES", default_value_t = 10 * 1024 * 1024)]
    max_file_bytes: u64,
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Serve(args) => serve(args).await,
        command => client(&cli.addr, cli.session, command).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

type AnyError = Box<dyn std::error::Error + Send + Sync>;

async fn serve(args: ServeArgs) -> Result<ExitCode, AnyError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let workspace_dir = args
        .workspace_dir
        .unwrap_or_else(|| std::env::temp_dir().join("sandboxd").join("workspaces"));
    let mut config = Config::new(workspace_dir);
    config.allowed_roots = args.allow_roots;
    config.default_ttl = Duration::from_secs(args.default_ttl);
    config.max_ttl = Duration::from_secs(args.max_ttl);
    config.max_sessions = args.max_sessions;
    config.limits.max_file_bytes = args.max_file_bytes;
    let registry = Arc::new(Registry::new(config)?);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "sandboxd listening");
    sandboxd::server::serve(
        listener,
        registry,
        Duration::from_secs(5),
        shutdown_signal(),
    )
    .await?;
    tracing::info!("sandboxd stopped");
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the process still dies on the default action.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}

async fn client(
    addr: &str,
    session: Option<String>,
    command: Command,
) -> Result<ExitCode, AnyError> {
    let channel = Channel::from_shared(addr.to_string())?
        .connect()
        .await
        .map_err(|e| {
            format!("cannot reach sandboxd at {addr}: {e} (start it with `sandboxd serve`)")
        })?;
    let mut c = SandboxClient::new(channel)
        .max_decoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES);
    let need_session = || {
        session
            .clone()
            .ok_or("no session: pass --session ID or set SANDBOXD_SESSION")
    };
    let outcome = match command {
        Command::Serve(_) => unreachable_serve(),
        Command::Session(SessionCommand::Create {
            workspace,
            ttl,
            quiet,
        }) => c
            .create_session(pb::CreateSessionRequest {
                workspace_path: workspace.unwrap_or_default(),
                ttl_seconds: ttl,
            })
            .await
            .map(|r| {
                let s = r.into_inner();
                if quiet {
                    println!("{}", s.session_id);
                } else {
                    print_session(&s);
                }
            }),
        Command::Session(SessionCommand::Get { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.get_session(pb::GetSessionRequest { session_id })
                .await
                .map(|r| print_session(&r.into_inner()))
        }
        Command::Session(SessionCommand::List) => {
            c.list_sessions(pb::ListSessionsRequest {}).await.map(|r| {
                for s in r.into_inner().sessions {
                    println!("{}  {}", s.session_id, s.workspace_path);
                }
            })
        }
        Command::Session(SessionCommand::Close { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.close_session(pb::CloseSessionRequest { session_id })
                .await
                .map(|r| println!("{}", r.into_inner().message))
        }
        Command::Read {
            path,
            offset,
            limit,
            raw,
        } => c
            .read_file(pb::ReadFileRequest {
                session_id: need_session()?,
                path,
                offset,
                limit,
            })
            .await
            .map(|r| print_read(&r.into_inner(), raw)),
        Command::Create {
            path,
            content,
            from,
        } => {
            let content = match (content, from) {
                (Some(text), _) => text,
                (None, Some(file)) => std::fs::read_to_string(file)?,
                (None, None) => {
                    let mut text = String::new();
                    std::io::stdin().read_to_string(&mut text)?;
                    text
                }
            };
            c.create_file(pb::CreateFileRequest {
                session_id: need_session()?,
                path,
                content,
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                println!("{}\nsha256 {}", r.message, r.sha256);
            })
        }
        Command::Edit {
            path,
            old,
            new,
            replace_all,
            expected_sha256,
        } => {
            if old.len() != new.len() {
                return Err(format!(
                    "{} --old but {} --new: give one --new per --old",
                    old.len(),
                    new.len()
                )
                .into());
            }
            let edits = old
                .into_iter()
                .zip(new)
                .map(|(old_string, new_string)| pb::Edit {
                    old_string,
                    new_string,
                    replace_all,
                })
                .collect();
            c.edit_file(pb::EditFileRequest {
                session_id: need_session()?,
                path,
                edits,
                expected_sha256: expected_sha256.unwrap_or_default(),
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                println!("{}", r.message);
                print!("{}", r.diff);
                if r.diff_truncated {
                    println!("... (diff truncated)");
                }
            })
        }
        Command::Ls { path } => c
            .list_dir(pb::ListDirRequest {
                session_id: need_session()?,
                path,
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                for e in &r.entries {
                    let (mark, size) = match e.kind() {
                        pb::dir_entry::Kind::Dir => ("/", String::new()),
                        pb::dir_entry::Kind::Symlink => ("@", String::new()),
                        _ => ("", format!("{:>10}  ", e.size_bytes)),
                    };
                    println!("{size:>12}{}{mark}", e.name);
                }
                if r.truncated {
                    println!("... (more entries)");
                }
            }),
        Command::Find {
            pattern,
            path,
            limit,
        } => c
            .find_files(pb::FindFilesRequest {
                session_id: need_session()?,
                pattern,
                path,
                limit,
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                r.paths.iter().for_each(|p| println!("{p}"));
                if r.truncated {
                    println!("... (more matches)");
                }
            }),
        Command::Grep {
            pattern,
            path,
            glob,
            ignore_case,
            limit,
        } => c
            .search_files(pb::SearchFilesRequest {
                session_id: need_session()?,
                pattern,
                path,
                glob,
                case_insensitive: ignore_case,
                limit,
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                for m in &r.matches {
                    println!("{}:{}: {}", m.path, m.line, m.text);
                }
                if r.truncated {
                    println!("... (more matches)");
                }
            }),
    };
    match outcome {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(status) => {
            let reason = status
                .get_details_error_info()
                .map_or_else(|| format!("{:?}", status.code()), |i| i.reason);
            eprintln!("refused [{reason}]: {}", status.message());
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}

fn unreachable_serve() -> Result<(), tonic::Status> {
    Err(tonic::Status::internal("serve is not a client verb"))
}

fn print_session(s: &pb::Session) {
    println!("session   {}", s.session_id);
    println!(
        "workspace {}{}",
        s.workspace_path,
        if s.owns_workspace {
            " (fresh, removed on close)"
        } else {
            ""
        }
    );
    println!("ttl       {}s idle", s.ttl_seconds);
}

fn print_read(r: &pb::ReadFileResponse, raw: bool) {
    if raw {
        print!("{}", r.content);
        return;
    }
    let width = r.last_line.to_string().len().max(4);
    for (i, line) in r.content.split_inclusive('\n').enumerate() {
        print!("{:>width$}  {}", r.first_line + i as u64, line);
        if !line.ends_with('\n') {
            println!();
        }
    }
    println!("-- {} (sha256 {})", r.message, r.sha256);
}
