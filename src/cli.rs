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
use sandboxd::policy::guard::SlipGuard;
use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::sandbox::{Limits, Runtime};
use sandboxd::session::{Config, Registry, SandboxConfig, defaults};
use tonic::transport::Channel;
use tonic_types::StatusExt;

use crate::terminal::Console;

/// Where the client verbs print: every line that carries text the sandboxed
/// side controls goes through it.
type Stdio = Console<std::io::Stdout, std::io::Stderr>;

/// Exit code of a refused call or a failure to reach the service.
pub const EXIT_FAILURE: u8 = 1;

/// sandboxd: a sandbox service for coding agents.
#[derive(Debug, Parser)]
#[command(name = "sandboxd", version, about)]
pub struct Cli {
    /// Address of the service, for client verbs: http://HOST:PORT,
    /// https://HOST:PORT (with --ca-cert) or unix:/PATH.
    #[arg(
        long,
        global = true,
        env = "SANDBOXD_ADDR",
        default_value = defaults::ADDR
    )]
    addr: String,
    /// CA certificate (PEM) that signed the service's TLS certificate, for
    /// https:// addresses.
    #[arg(long, global = true, env = "SANDBOXD_CA_CERT")]
    ca_cert: Option<PathBuf>,
    /// Session to act on, for file verbs.
    #[arg(short, long, global = true, env = "SANDBOXD_SESSION")]
    session: Option<String>,
    /// Bearer token: the one `serve` demands, or the one a client sends.
    #[arg(long, global = true, env = "SANDBOXD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service.
    Serve(Box<ServeArgs>),
    /// Run a shell command in the session's container, streaming its
    /// output; exits with the command's exit code (124 on timeout).
    Run {
        /// Working directory relative to the workspace.
        #[arg(long, default_value = "")]
        cwd: String,
        /// Timeout in milliseconds (0: server default, 30 s).
        #[arg(long, default_value_t = 0)]
        timeout_ms: u64,
        /// Extra environment, KEY=VALUE (repeatable).
        #[arg(long = "env", value_parser = parse_key_value)]
        env: Vec<(String, String)>,
        /// Characters kept per stream (0: server default, 4000).
        #[arg(long, default_value_t = 0)]
        cap: u64,
        /// The command (joined with spaces, run by /bin/sh -c).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Build the default sandbox image if it is missing (also done by
    /// `serve` and on first use).
    #[command(subcommand)]
    Image(ImageCommand),
    /// Show the whole loop on a small project: run the tests (red), read the
    /// code, fix it with an edit, run the tests again (green).
    Demo,
    /// Measure sandboxd against Docker itself; writes BENCHMARKS.md.
    Bench(crate::bench::BenchArgs),
    /// Waits forever: the main process of a container whose image may have
    /// nothing but a shell (started by the service, not by people).
    #[command(hide = true)]
    Idle,
    /// The in-container supervisor (started by the service, not by people).
    #[command(hide = true)]
    Supervise {
        /// Unix socket of the service to connect to (default: stdio).
        #[arg(long)]
        connect: Option<PathBuf>,
        /// "uid:gid" the commands run as (the supervisor itself runs as
        /// root, out of their reach).
        #[arg(long)]
        user: Option<String>,
    },
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
        /// Print the content only, without numbers or summary (on a
        /// terminal, control characters are still shown, not sent).
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
    /// Show the session's audit journal: files written, commands run,
    /// refused calls, and how they compare with a plan.
    Report {
        /// A file you planned to change (repeatable).
        #[arg(long = "planned")]
        planned: Vec<String>,
        /// A command whose run after the last write verifies the change,
        /// e.g. "pytest -q" (matched whole, whitespace collapsed: "pytest
        /// --co" does not count as "pytest").
        #[arg(long)]
        verify: Option<String>,
        /// Also print every journal entry.
        #[arg(long)]
        journal: bool,
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
enum ImageCommand {
    /// Build the default image from images/default/build.sh unless present.
    Build {
        /// Docker daemon address (default: DOCKER_HOST or the local socket).
        #[arg(long, env = "SANDBOXD_DOCKER_HOST")]
        docker_host: Option<String>,
    },
    /// Print the default image reference.
    Name,
}

/// Where `serve` listens.
#[derive(Debug, Clone)]
enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

fn parse_listen(s: &str) -> Result<ListenAddr, String> {
    match s.strip_prefix("unix:") {
        Some(path) if path.starts_with('/') => Ok(ListenAddr::Unix(PathBuf::from(path))),
        Some(_) => Err(format!(
            "{s:?}: a Unix socket needs an absolute path (unix:/PATH)"
        )),
        None => s
            .parse()
            .map(ListenAddr::Tcp)
            .map_err(|e| format!("{s:?} is not HOST:PORT or unix:/PATH: {e}")),
    }
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
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
        /// Image (default: the service's default image).
        #[arg(long, default_value = "")]
        image: String,
        /// Reading, listing and searching only: no writes, no commands.
        #[arg(long)]
        read_only: bool,
        /// Glob of paths the file tools must not write, e.g. "tests/**"
        /// (repeatable).
        #[arg(long = "deny-write")]
        deny_writes: Vec<String>,
        /// Allow writes only to paths matching these globs (repeatable); a
        /// deny always wins.
        #[arg(long = "allow-write")]
        allow_writes: Vec<String>,
        /// Extra regular expression the slip guard refuses (repeatable).
        #[arg(long = "guard-pattern")]
        guard_patterns: Vec<String>,
        /// Disk quota of a fresh workspace, in bytes (0: server default).
        #[arg(long, default_value_t = 0)]
        disk_bytes: u64,
        /// Most files and directories in a fresh workspace (0: server default).
        #[arg(long, default_value_t = 0)]
        inodes: u64,
    },
    /// Kill the session's sandbox and start a fresh one over the same
    /// workspace (default: --session): clears anything left running, such
    /// as a fork bomb or a forgotten server.
    Reset {
        /// Session id.
        id: Option<String>,
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
    /// Address to listen on: HOST:PORT, or unix:/PATH for a Unix socket
    /// (mode 0600: only this user may connect). A non-loopback TCP address
    /// requires a token.
    #[arg(long, env = "SANDBOXD_LISTEN", default_value = defaults::LISTEN, value_parser = parse_listen)]
    listen: ListenAddr,
    /// File holding the bearer token every call must carry (or set
    /// SANDBOXD_TOKEN).
    #[arg(long, env = "SANDBOXD_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// TLS certificate chain (PEM); serves TLS together with --tls-key.
    #[arg(long, env = "SANDBOXD_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, env = "SANDBOXD_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Glob of workspace paths no session may write through the file tools,
    /// e.g. "tests/**" (repeatable, or comma-separated in the environment).
    #[arg(
        long = "deny-write",
        env = "SANDBOXD_DENY_WRITES",
        value_delimiter = ','
    )]
    deny_writes: Vec<String>,
    /// Directory where each session's journal is appended as JSON lines
    /// (<dir>/<session id>.jsonl), for external audit.
    #[arg(long, env = "SANDBOXD_JOURNAL_DIR")]
    journal_dir: Option<PathBuf>,
    /// The service's private state directory: fresh workspaces, pins of
    /// lent directories, supervisor sockets (default:
    /// /var/lib/sandboxd/<service name> for root). Made 0700 if missing;
    /// the service refuses to start if another user could change it.
    #[arg(long, env = "SANDBOXD_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Existing directories under this root may be used as workspaces
    /// (repeatable, or comma-separated in the environment).
    #[arg(
        long = "allow-root",
        env = "SANDBOXD_ALLOW_ROOTS",
        value_delimiter = ','
    )]
    allow_roots: Vec<PathBuf>,
    /// Idle timeout of a session when the request gives none, in seconds.
    #[arg(long, env = "SANDBOXD_DEFAULT_TTL", default_value_t = defaults::TTL_SECS)]
    default_ttl: u64,
    /// Ceiling on a requested idle timeout, in seconds.
    #[arg(long, env = "SANDBOXD_MAX_TTL", default_value_t = defaults::MAX_TTL_SECS)]
    max_ttl: u64,
    /// Ceiling on open sessions.
    #[arg(long, env = "SANDBOXD_MAX_SESSIONS", default_value_t = defaults::MAX_SESSIONS)]
    max_sessions: usize,
    /// Largest file the file tools read, edit or create, in bytes.
    #[arg(long, env = "SANDBOXD_MAX_FILE_BYTES", default_value_t = defaults::MAX_FILE_BYTES)]
    max_file_bytes: u64,
    /// Name of this service: at startup, containers left by an earlier
    /// instance with the same name are removed.
    #[arg(long, env = "SANDBOXD_SERVICE_NAME", default_value = defaults::SERVICE_NAME)]
    service_name: String,
    /// Docker daemon address (default: DOCKER_HOST or the local socket).
    #[arg(long, env = "SANDBOXD_DOCKER_HOST")]
    docker_host: Option<String>,
    /// Image for sessions that name none (default: the built-in recipe's).
    #[arg(long, env = "SANDBOXD_IMAGE")]
    image: Option<String>,
    /// A further image sessions may name (repeatable, or comma-separated
    /// in the environment); the default image is always allowed, any other
    /// is refused with IMAGE_NOT_ALLOWED.
    #[arg(
        long = "allow-image",
        env = "SANDBOXD_ALLOW_IMAGES",
        value_delimiter = ','
    )]
    allow_images: Vec<String>,
    /// Container runtime, e.g. runsc for gVisor (default: the engine's).
    #[arg(long, env = "SANDBOXD_CONTAINER_RUNTIME")]
    container_runtime: Option<String>,
    /// Command timeout when the request gives none, in milliseconds.
    #[arg(long, env = "SANDBOXD_DEFAULT_TIMEOUT_MS", default_value_t = defaults::TIMEOUT_MS)]
    default_timeout_ms: u64,
    /// Ceiling on a requested command timeout, in milliseconds.
    #[arg(long, env = "SANDBOXD_MAX_TIMEOUT_MS", default_value_t = defaults::MAX_TIMEOUT_MS)]
    max_timeout_ms: u64,
    /// Characters kept per output stream when the request gives none.
    #[arg(long, env = "SANDBOXD_DEFAULT_OUTPUT_CAP", default_value_t = defaults::OUTPUT_CAP)]
    default_output_cap: u64,
    /// Ceiling on a requested output cap.
    #[arg(long, env = "SANDBOXD_MAX_OUTPUT_CAP", default_value_t = defaults::MAX_OUTPUT_CAP)]
    max_output_cap: u64,
    /// Container memory limit when the session asks for none, in bytes.
    #[arg(long, env = "SANDBOXD_MEMORY_BYTES", default_value_t = defaults::MEMORY_BYTES)]
    memory_bytes: u64,
    /// Ceiling on a session's memory limit, in bytes.
    #[arg(long, env = "SANDBOXD_MAX_MEMORY_BYTES", default_value_t = defaults::MAX_MEMORY_BYTES)]
    max_memory_bytes: u64,
    /// Container CPU quota when the session asks for none (1e9 = one CPU).
    #[arg(long, env = "SANDBOXD_NANO_CPUS", default_value_t = defaults::NANO_CPUS)]
    nano_cpus: u64,
    /// Ceiling on a session's CPU quota.
    #[arg(long, env = "SANDBOXD_MAX_NANO_CPUS", default_value_t = defaults::MAX_NANO_CPUS)]
    max_nano_cpus: u64,
    /// Container process limit when the session asks for none.
    #[arg(long, env = "SANDBOXD_PIDS", default_value_t = defaults::PIDS)]
    pids: u64,
    /// Ceiling on a session's process limit.
    #[arg(long, env = "SANDBOXD_MAX_PIDS", default_value_t = defaults::MAX_PIDS)]
    max_pids: u64,
    /// Disk quota of a fresh workspace when the session asks for none, in
    /// bytes (each fresh workspace is its own filesystem of this size).
    #[arg(long, env = "SANDBOXD_DISK_BYTES", default_value_t = defaults::DISK_BYTES)]
    disk_bytes: u64,
    /// Ceiling on a session's disk quota, in bytes.
    #[arg(long, env = "SANDBOXD_MAX_DISK_BYTES", default_value_t = defaults::MAX_DISK_BYTES)]
    max_disk_bytes: u64,
    /// Files and directories a fresh workspace may hold when the session
    /// asks for no other number.
    #[arg(long, env = "SANDBOXD_INODES", default_value_t = defaults::INODES)]
    inodes: u64,
    /// Ceiling on a session's inode quota.
    #[arg(long, env = "SANDBOXD_MAX_INODES", default_value_t = defaults::MAX_INODES)]
    max_inodes: u64,
    /// Size of each container's /tmp tmpfs, in bytes.
    #[arg(long, env = "SANDBOXD_TMP_BYTES", default_value_t = defaults::TMP_BYTES)]
    tmp_bytes: u64,
    /// How commands run: `supervisor` (one long-lived supervisor per
    /// container, this binary mounted read-only; falls back to `exec` when
    /// it cannot start) or `exec` (one Docker exec per command).
    #[arg(long, env = "SANDBOXD_EXEC_MODE", default_value = "supervisor", value_parser = ["supervisor", "exec"])]
    exec_mode: String,
    /// Warm containers kept ready so a session with a fresh workspace (and
    /// the default image and limits) starts without waiting for Docker.
    #[arg(long, env = "SANDBOXD_POOL_SIZE", default_value_t = defaults::POOL_SIZE)]
    pool_size: usize,
    /// Turn the slip guard off (it prevents slips, not attacks).
    #[arg(long, env = "SANDBOXD_NO_GUARD")]
    no_guard: bool,
    /// Serve a loopback TCP address without a token. By default `serve`
    /// makes one when none is given and writes it to <state dir>/token
    /// (mode 0600): every local user can reach a loopback port, so without
    /// a token any of them could drive every session.
    #[arg(long, env = "SANDBOXD_NO_TOKEN")]
    no_token: bool,
    /// Extra regular expression the slip guard refuses (repeatable).
    #[arg(
        long = "guard-deny",
        env = "SANDBOXD_GUARD_DENY",
        value_delimiter = '\n'
    )]
    guard_deny: Vec<String>,
}

impl Cli {
    /// True for the hidden `supervise` subcommand.
    pub fn is_supervisor(&self) -> bool {
        matches!(self.command, Command::Supervise { .. } | Command::Idle)
    }
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> ExitCode {
    if std::env::args().any(|a| a == "--token" || a.starts_with("--token=")) {
        eprintln!(
            "warning: a token on the command line is visible to every local user (ps, /proc); \
             pass it in SANDBOXD_TOKEN or a token file instead"
        );
    }
    let result = match cli.command {
        Command::Serve(args) => serve(*args, cli.token).await,
        Command::Image(ImageCommand::Build { docker_host }) => build_image(docker_host).await,
        Command::Image(ImageCommand::Name) => {
            println!("{}", sandboxd::sandbox::image::default_image());
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo => crate::demo::run().await,
        Command::Bench(args) => crate::bench::run(args).await,
        Command::Idle => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        Command::Supervise { connect, user } => {
            sandboxd::sandbox::supervisor::inside::supervise(connect, user)
                .await
                .map(|()| ExitCode::SUCCESS)
                .map_err(Into::into)
        }
        command => {
            let token = cli.token.or_else(|| local_token(&cli.addr));
            client(
                &cli.addr,
                cli.ca_cert.as_deref(),
                cli.session,
                token,
                command,
            )
            .await
        }
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

async fn serve(args: ServeArgs, token: Option<String>) -> Result<ExitCode, AnyError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let state_dir = args
        .state_dir
        .unwrap_or_else(|| sandboxd::state::StateDir::default_path(&args.service_name));
    let mut config = Config::new(state_dir.clone());
    config.allowed_roots = args.allow_roots;
    config.default_ttl = Duration::from_secs(args.default_ttl);
    config.max_ttl = Duration::from_secs(args.max_ttl);
    config.max_sessions = args.max_sessions;
    config.deny_writes = args.deny_writes;
    config.journal_dir = args.journal_dir;
    config.limits.max_file_bytes = args.max_file_bytes;
    let mut sandbox = SandboxConfig::new(&args.service_name);
    if let Some(image) = args.image {
        sandbox.default_image = image;
    }
    sandbox.allowed_images = args.allow_images;
    sandbox.runtime = args.container_runtime;
    sandbox.default_limits = Limits {
        memory_bytes: args.memory_bytes,
        nano_cpus: args.nano_cpus,
        pids: args.pids,
        disk_bytes: args.disk_bytes,
        inodes: args.inodes,
    };
    sandbox.max_limits = Limits {
        memory_bytes: args.max_memory_bytes,
        nano_cpus: args.max_nano_cpus,
        pids: args.max_pids,
        disk_bytes: args.max_disk_bytes,
        inodes: args.max_inodes,
    };
    sandbox.tmp_bytes = args.tmp_bytes;
    sandbox.pool_size = args.pool_size;
    if args.exec_mode == "supervisor" {
        sandbox.supervisor = Some(std::env::current_exe()?);
        sandbox.socket_link = true;
    }
    sandbox.default_timeout = Duration::from_millis(args.default_timeout_ms);
    sandbox.max_timeout = Duration::from_millis(args.max_timeout_ms);
    sandbox.default_cap = args.default_output_cap;
    sandbox.max_cap = args.max_output_cap;
    sandbox.guard = SlipGuard::new(!args.no_guard, &args.guard_deny)?;
    let default_image = sandbox.default_image.clone();
    config.sandbox = sandbox;

    let token = match (token, &args.token_file) {
        (Some(t), _) => Some(t),
        (None, Some(file)) => Some(
            std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read the token file {}: {e}", file.display()))?
                .trim()
                .to_string(),
        ),
        (None, None) => None,
    };
    if token.as_deref().is_some_and(str::is_empty) {
        return Err("the token is empty".into());
    }
    if let ListenAddr::Tcp(addr) = &args.listen
        && token.is_none()
        && !addr.ip().is_loopback()
    {
        return Err(format!(
            "refusing to listen on {addr} without a token: anyone who reaches it could run commands. \
             Set --token-file or SANDBOXD_TOKEN, or listen on a loopback address or a Unix socket."
        )
        .into());
    }
    // A TCP port, even on loopback, is open to every local user: unless the
    // operator says otherwise, demand a token the service makes itself.
    let token = match (&args.listen, token) {
        (ListenAddr::Tcp(addr), None) if !args.no_token => {
            Some(make_token(&config.state_dir, addr)?)
        }
        (_, token) => token,
    };

    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let read = |path: &PathBuf| {
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
            };
            Some(sandboxd::server::TlsIdentity {
                cert_pem: read(cert)?,
                key_pem: read(key)?,
            })
        }
        _ => None,
    };
    if let ListenAddr::Tcp(addr) = &args.listen
        && tls.is_none()
        && !addr.ip().is_loopback()
    {
        tracing::warn!(%addr, "serving without TLS on a non-loopback address: the token travels in clear text");
    }
    let docker = Arc::new(DockerRuntime::new(args.docker_host));
    let runtime: Arc<dyn Runtime> = docker.clone();
    let registry = Arc::new(Registry::new(config, runtime.clone())?);
    // Bind first so a taken port fails fast, before any slow image build.
    let (listener, socket_file): (sandboxd::server::Listener, _) = match &args.listen {
        ListenAddr::Tcp(addr) => (tokio::net::TcpListener::bind(addr).await?.into(), None),
        ListenAddr::Unix(path) => (bind_unix(path)?.into(), Some(path.clone())),
    };
    match docker.ping().await {
        Ok(()) => {
            match registry.sweep_leaked().await {
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "cannot sweep leaked containers"),
            }
            if let Err(e) = runtime.ensure_image(&default_image).await {
                tracing::warn!(error = %e, "the default image is not ready; commands will fail until it is");
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "Docker is unreachable: file tools work, commands fail with SANDBOX_UNAVAILABLE");
            // Workspaces an earlier instance left are removed all the same
            // (a leaked container still using one keeps its detached mount
            // until the engine is back and the container goes).
            registry.sweep_volumes().await;
        }
    }
    match &listener {
        sandboxd::server::Listener::Tcp(l) => {
            tracing::info!(addr = %l.local_addr()?, tls = tls.is_some(), "sandboxd listening")
        }
        sandboxd::server::Listener::Unix(_) => {
            tracing::info!(socket = ?socket_file, "sandboxd listening")
        }
    }
    let access = sandboxd::server::Access { token, tls };
    let served = sandboxd::server::serve(
        listener,
        registry,
        Duration::from_secs(5),
        access,
        shutdown_signal(),
    )
    .await;
    if let Some(path) = socket_file {
        let _ = std::fs::remove_file(path);
    }
    // The token dies with this instance: a client must never find a stale
    // one and hand it to whoever takes the port next.
    if let Ok(state) = sandboxd::state::StateDir::open(&state_dir) {
        let _ = state.remove_file(TOKEN_FILE);
        let _ = state.remove_file(LISTEN_FILE);
    }
    served?;
    tracing::info!("sandboxd stopped");
    Ok(ExitCode::SUCCESS)
}

/// The file where `serve` writes the token it made.
const TOKEN_FILE: &str = "token";
/// The file where `serve` writes the address the token is for.
const LISTEN_FILE: &str = "listen";

/// Makes a fresh token for the service listening on `addr` and writes it
/// to `<state_dir>/token`, readable by the service's user only, with the
/// address beside it (the CLI run as that user finds both there).
fn make_token(
    state_dir: &std::path::Path,
    addr: &std::net::SocketAddr,
) -> Result<String, AnyError> {
    use std::io::Write;
    let state = sandboxd::state::StateDir::open(state_dir)?;
    let (a, b) = uuid::Uuid::new_v4().as_u64_pair();
    let (c, d) = uuid::Uuid::new_v4().as_u64_pair();
    let token = format!("{a:016x}{b:016x}{c:016x}{d:016x}");
    for (name, text) in [(LISTEN_FILE, addr.to_string()), (TOKEN_FILE, token.clone())] {
        state.remove_file(name)?;
        let mut file = state.create_private(name)?;
        file.write_all(format!("{text}\n").as_bytes())?;
        file.sync_all()?;
    }
    tracing::info!(
        file = %state.path().join(TOKEN_FILE).display(),
        "every call must carry the token in this file (the CLI, run as this user, reads it)"
    );
    Ok(token)
}

/// The token a service on this machine made (see [`make_token`]), for a
/// client run by the same user. It is sent only to the exact address that
/// service recorded, and only while a socket of the token's owner listens
/// there: never to another port, another host, or a port someone else took
/// after the service stopped.
fn local_token(addr: &str) -> Option<String> {
    let service = std::env::var("SANDBOXD_SERVICE_NAME").unwrap_or_else(|_| "sandboxd".into());
    local_token_in(&sandboxd::state::StateDir::default_path(&service), addr)
}

/// [`local_token`] for the service whose state directory is `dir`.
fn local_token_in(dir: &std::path::Path, addr: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uri: tonic::transport::Uri = addr.parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = host.parse().ok()?;
    let target = std::net::SocketAddr::new(ip, uri.port_u16()?);
    if !ip.is_loopback() {
        return None;
    }
    let recorded: std::net::SocketAddr = std::fs::read_to_string(dir.join(LISTEN_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if recorded != target {
        return None;
    }
    let file = dir.join(TOKEN_FILE);
    let owner = std::fs::metadata(&file).ok()?.uid();
    if listener_owner(target) != Some(owner) {
        return None;
    }
    let token = std::fs::read_to_string(file).ok()?.trim().to_string();
    (!token.is_empty()).then_some(token)
}

/// The uid owning the TCP socket listening on `addr`, from the kernel's
/// socket tables.
fn listener_owner(addr: std::net::SocketAddr) -> Option<u32> {
    // /proc/net/tcp* name an address as the hex of its bytes in memory
    // (each 32-bit word in host order) and the port in big-endian hex.
    let (table, want) = match addr.ip() {
        std::net::IpAddr::V4(ip) => (
            "/proc/net/tcp",
            format!(
                "{:08X}:{:04X}",
                u32::from_ne_bytes(ip.octets()),
                addr.port()
            ),
        ),
        std::net::IpAddr::V6(ip) => {
            let words: String = ip
                .octets()
                .chunks(4)
                .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
                .collect();
            ("/proc/net/tcp6", format!("{words}:{:04X}", addr.port()))
        }
    };
    const LISTEN: &str = "0A";
    std::fs::read_to_string(table)
        .ok()?
        .lines()
        .skip(1)
        .find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.get(1) == Some(&want.as_str()) && f.get(3) == Some(&LISTEN))
                .then(|| f.get(7)?.parse().ok())
                .flatten()
        })
}

/// Binds a Unix socket only this user can connect to. A stale socket left
/// by a dead instance is replaced; any other file at the path is not.
fn bind_unix(path: &std::path::Path) -> Result<tokio::net::UnixListener, AnyError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!("{} exists and is not a socket", path.display()).into());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!("{} is in use by a running service", path.display()).into());
        }
        std::fs::remove_file(path)?;
    }
    // Bound inside a private directory beside the target, made 0600 there,
    // then renamed into place: no other user can connect in between, and
    // the process umask (shared by every thread) is never touched.
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let staging = tempfile::Builder::new()
        .prefix(".sandboxd-bind-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
        .map_err(|e| format!("cannot bind {}: {e}", path.display()))?;
    std::fs::set_permissions(staging.path(), std::fs::Permissions::from_mode(0o700))?;
    let staged = staging.path().join("sock");
    let listener = tokio::net::UnixListener::bind(&staged)
        .map_err(|e| format!("cannot bind {}: {e}", path.display()))?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&staged, path).map_err(|e| format!("cannot bind {}: {e}", path.display()))?;
    staging.close()?;
    Ok(listener)
}

async fn build_image(docker_host: Option<String>) -> Result<ExitCode, AnyError> {
    let docker = DockerRuntime::new(docker_host);
    let image = sandboxd::sandbox::image::default_image();
    eprintln!("building {image} if missing (about a minute the first time)...");
    let built = docker.build_default_image().await?;
    println!(
        "{image} {}",
        if built { "built" } else { "already present" }
    );
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

/// Adds the bearer token, if any, to every call.
#[derive(Clone)]
struct TokenHeader(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for TokenHeader {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            req.metadata_mut().insert("authorization", value.clone());
        }
        Ok(req)
    }
}

type Client = SandboxClient<tonic::service::interceptor::InterceptedService<Channel, TokenHeader>>;

/// Connects to `addr`: http://, https:// (trusting `ca_cert`, or the
/// system's roots when none is given) or unix:/PATH.
pub async fn connect(addr: &str, ca_cert: Option<&std::path::Path>) -> Result<Channel, AnyError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    let unreachable = |e: tonic::transport::Error| {
        format!("cannot reach sandboxd at {addr}: {e:?} (start it with `sandboxd serve`)")
    };
    if let Some(path) = addr.strip_prefix("unix:") {
        let path = PathBuf::from(path.trim_start_matches("//"));
        // The URI is required by the API and unused by the connector.
        let channel = Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await
            .map_err(unreachable)?;
        return Ok(channel);
    }
    let mut endpoint = Endpoint::from_shared(addr.to_string())?;
    if addr.starts_with("https://") {
        let mut tls = ClientTlsConfig::new();
        match ca_cert {
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                tls = tls.ca_certificate(Certificate::from_pem(pem));
            }
            None => return Err("an https:// address needs --ca-cert (or SANDBOXD_CA_CERT)".into()),
        }
        endpoint = endpoint.tls_config(tls)?;
    }
    Ok(endpoint.connect().await.map_err(unreachable)?)
}

/// Runs one client verb, printing through a [`Console`] over stdout and
/// stderr.
async fn client(
    addr: &str,
    ca_cert: Option<&std::path::Path>,
    session: Option<String>,
    token: Option<String>,
    command: Command,
) -> Result<ExitCode, AnyError> {
    let mut con = Console::stdio();
    let code = match call(addr, ca_cert, session, token, command, &mut con).await {
        Ok(code) => code,
        // Printed here, not by `run`: the error may echo what the service
        // sent, and it must start on a line of its own.
        Err(e) => {
            con.status(format_args!("error: {e}"));
            ExitCode::from(EXIT_FAILURE)
        }
    };
    con.finish()
        .map_err(|e| format!("cannot write the output: {e}"))?;
    Ok(code)
}

/// Connects, makes the verb's call and prints its result; a refusal prints
/// its reason and message.
async fn call(
    addr: &str,
    ca_cert: Option<&std::path::Path>,
    session: Option<String>,
    token: Option<String>,
    command: Command,
    con: &mut Stdio,
) -> Result<ExitCode, AnyError> {
    let header = token
        .map(|t| format!("Bearer {t}").parse())
        .transpose()
        .map_err(|_| "the token has characters a header cannot carry")?;
    let channel = connect(addr, ca_cert).await?;
    let mut c = SandboxClient::with_interceptor(channel, TokenHeader(header))
        .max_decoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES);
    let need_session = || {
        session
            .clone()
            .ok_or("no session: pass --session ID or set SANDBOXD_SESSION")
    };
    let outcome = match command {
        Command::Serve(_)
        | Command::Image(_)
        | Command::Demo
        | Command::Bench(_)
        | Command::Idle
        | Command::Supervise { .. } => unreachable_serve(),
        Command::Run {
            cwd,
            timeout_ms,
            env,
            cap,
            command,
        } => {
            let req = pb::RunCommandRequest {
                session_id: need_session()?,
                command: command.join(" "),
                cwd,
                timeout_ms,
                env: env.into_iter().collect(),
                stdout_cap: cap,
                stderr_cap: cap,
            };
            match run_streaming(&mut c, req, con).await {
                Ok(code) => return Ok(code),
                Err(status) => Err(status),
            }
        }
        Command::Session(SessionCommand::Create {
            workspace,
            ttl,
            quiet,
            image,
            read_only,
            deny_writes,
            allow_writes,
            guard_patterns,
            disk_bytes,
            inodes,
        }) => c
            .create_session(pb::CreateSessionRequest {
                workspace_path: workspace.unwrap_or_default(),
                ttl_seconds: ttl,
                image,
                limits: (disk_bytes != 0 || inodes != 0).then_some(pb::Limits {
                    disk_bytes,
                    inodes,
                    ..Default::default()
                }),
                policy: Some(pb::Policy {
                    read_only,
                    deny_writes,
                    allow_writes,
                    guard_patterns,
                }),
                ..Default::default()
            })
            .await
            .map(|r| {
                let s = r.into_inner();
                if quiet {
                    con.out(format_args!("{}\n", s.session_id));
                } else {
                    print_session(con, &s);
                }
            }),
        Command::Session(SessionCommand::Get { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.get_session(pb::GetSessionRequest { session_id })
                .await
                .map(|r| print_session(con, &r.into_inner()))
        }
        Command::Session(SessionCommand::List) => {
            c.list_sessions(pb::ListSessionsRequest {}).await.map(|r| {
                for s in r.into_inner().sessions {
                    con.out(format_args!("{}  {}\n", s.session_id, s.workspace_path));
                }
            })
        }
        Command::Session(SessionCommand::Reset { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.reset_sandbox(pb::ResetSandboxRequest { session_id })
                .await
                .map(|r| println!("{}", r.into_inner().message))
        }
        Command::Session(SessionCommand::Close { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.close_session(pb::CloseSessionRequest { session_id })
                .await
                .map(|r| con.out(format_args!("{}\n", r.into_inner().message)))
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
            .map(|r| print_read(con, &r.into_inner(), raw)),
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
                con.out(format_args!("{}\nsha256 {}\n", r.message, r.sha256));
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
                con.out(format_args!("{}\n{}", r.message, r.diff));
                if r.diff_truncated {
                    con.out(format_args!("... (diff truncated)\n"));
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
                    con.out(format_args!("{size:>12}{}{mark}\n", e.name));
                }
                if r.truncated {
                    con.out(format_args!("... (more entries)\n"));
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
                for p in &r.paths {
                    con.out(format_args!("{p}\n"));
                }
                if r.truncated {
                    con.out(format_args!("... (more matches)\n"));
                }
            }),
        Command::Report {
            planned,
            verify,
            journal,
        } => c
            .get_session_report(pb::GetSessionReportRequest {
                session_id: need_session()?,
                planned_files: planned,
                verification_command: verify.unwrap_or_default(),
            })
            .await
            .map(|r| print_report(con, &r.into_inner(), journal)),
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
                    con.out(format_args!("{}:{}: {}\n", m.path, m.line, m.text));
                }
                if r.truncated {
                    con.out(format_args!("... (more matches)\n"));
                }
            }),
    };
    match outcome {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(status) => {
            let reason = status
                .get_details_error_info()
                .map_or_else(|| format!("{:?}", status.code()), |i| i.reason);
            con.status(format_args!("refused [{reason}]: {}", status.message()));
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}

fn unreachable_serve() -> Result<(), tonic::Status> {
    Err(tonic::Status::internal("not a client verb"))
}

/// Streams a command's output live and returns the exit code to exit with.
async fn run_streaming(
    c: &mut Client,
    req: pb::RunCommandRequest,
    con: &mut Stdio,
) -> Result<ExitCode, tonic::Status> {
    use pb::run_command_event::Event;
    let mut events = c.run_command(req).await?.into_inner();
    while let Some(ev) = events.message().await? {
        match ev.event {
            Some(Event::Stdout(chunk)) => {
                con.out(format_args!("{}", chunk.data));
                con.flush();
            }
            Some(Event::Stderr(chunk)) => con.err(format_args!("{}", chunk.data)),
            Some(Event::Exit(exit)) => {
                let (out, err) = (
                    exit.stdout.clone().unwrap_or_default(),
                    exit.stderr.clone().unwrap_or_default(),
                );
                if out.truncated {
                    con.out(format_args!(
                        "\n[... {} bytes omitted ...]\n{}",
                        out.omitted_bytes, out.tail
                    ));
                }
                if err.truncated {
                    con.err(format_args!(
                        "\n[... {} bytes omitted ...]\n{}",
                        err.omitted_bytes, err.tail
                    ));
                }
                for note in &exit.notes {
                    con.status(format_args!("[note: {note}]"));
                }
                con.status(format_args!("{}", exit_summary(&exit)));
                let code = if exit.timed_out {
                    124
                } else {
                    exit.exit_code.clamp(0, 255) as u8
                };
                return Ok(ExitCode::from(code));
            }
            Some(Event::Started(_)) | None => {}
        }
    }
    Err(tonic::Status::unavailable(
        "the stream ended without an exit event",
    ))
}

/// One line saying how a command ended.
pub fn exit_summary(exit: &pb::CommandExit) -> String {
    let how = match exit.killed_by() {
        pb::KilledBy::None => String::new(),
        pb::KilledBy::ProcessGroupTerm => ", stopped by SIGTERM to its process group".into(),
        pb::KilledBy::ProcessGroupKill => ", stopped by SIGKILL to its process group".into(),
        pb::KilledBy::Container => ", stopped by killing its container".into(),
    };
    let timed_out = if exit.timed_out { "timed out, " } else { "" };
    let oom = if exit.oom_killed {
        ", out of memory: the kernel killed a process at the container's memory limit"
    } else {
        ""
    };
    let pids = if exit.pids_exhausted {
        ", process limit reached: forks failed"
    } else {
        ""
    };
    format!(
        "[{timed_out}exit {} in {} ms{how}{oom}{pids}]",
        exit.exit_code, exit.duration_ms
    )
}

fn print_report(con: &mut Stdio, r: &pb::SessionReport, journal: bool) {
    con.out(format_args!("files written ({}):\n", r.files_written.len()));
    for w in &r.files_written {
        let before = if w.sha256_before.is_empty() {
            "new"
        } else {
            prefix(&w.sha256_before, 12)
        };
        con.out(format_args!(
            "  #{:<4} {:<10} {}  {} -> {}\n",
            w.seq,
            w.tool,
            w.path,
            before,
            prefix(&w.sha256_after, 12)
        ));
    }
    con.out(format_args!("commands ({}):\n", r.commands.len()));
    for c in &r.commands {
        let mut how = format!("exit {}", c.exit_code);
        if c.timed_out {
            how.push_str(", timed out");
        }
        if c.oom_killed {
            how.push_str(", out of memory");
        }
        if c.cancelled {
            how.push_str(", cancelled");
        }
        con.out(format_args!("  #{:<4} {}  [{how}]\n", c.seq, c.command));
    }
    con.out(format_args!("refused ({}):\n", r.denied.len()));
    for d in &r.denied {
        con.out(format_args!(
            "  #{:<4} {:<10} {} [{}]\n",
            d.seq, d.tool, d.summary, d.reason
        ));
    }
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    if !r.planned_touched.is_empty() || !r.unplanned.is_empty() || !r.untouched.is_empty() {
        con.out(format_args!(
            "planned and touched: {}\ntouched, not planned: {}\nplanned, untouched:  {}\n",
            list(&r.planned_touched),
            list(&r.unplanned),
            list(&r.untouched)
        ));
    }
    if let Some(v) = &r.verification {
        let verdict = match (v.ran, v.ran_after_last_write, v.passed) {
            (false, _, _) => "never ran".to_string(),
            (true, false, _) => "did not run after the last write".to_string(),
            (true, true, true) => "ran after the last write and passed".to_string(),
            (true, true, false) => {
                format!("ran after the last write and failed (exit {})", v.exit_code)
            }
        };
        con.out(format_args!("verification {:?}: {verdict}\n", v.command));
    }
    if journal {
        con.out(format_args!("journal ({} dropped):\n", r.journal_dropped));
        for e in &r.journal {
            con.out(format_args!(
                "  #{:<4} {:<16} {:<10} {} ms  {}  {}\n",
                e.seq, e.tool, e.outcome, e.duration_ms, e.summary, e.detail
            ));
        }
    }
}

/// The first `chars` characters of `s` (ids and hashes come from the
/// service: never cut one inside a character).
fn prefix(s: &str, chars: usize) -> &str {
    s.char_indices().nth(chars).map_or(s, |(end, _)| &s[..end])
}

fn print_session(con: &mut Stdio, s: &pb::Session) {
    con.out(format_args!("session   {}\n", s.session_id));
    con.out(format_args!(
        "workspace {}{}\n",
        s.workspace_path,
        if s.owns_workspace {
            " (fresh, removed on close)"
        } else {
            ""
        }
    ));
    con.out(format_args!("ttl       {}s idle\n", s.ttl_seconds));
    if let Some(p) = &s.policy {
        let mut rules = Vec::new();
        if p.read_only {
            rules.push("read-only".to_string());
        }
        if !p.deny_writes.is_empty() {
            rules.push(format!("deny writes {}", p.deny_writes.join(", ")));
        }
        if !p.allow_writes.is_empty() {
            rules.push(format!("allow writes {}", p.allow_writes.join(", ")));
        }
        if !p.guard_patterns.is_empty() {
            rules.push(format!("guard {}", p.guard_patterns.join(", ")));
        }
        if !rules.is_empty() {
            con.out(format_args!("policy    {}\n", rules.join("; ")));
        }
    }
    con.out(format_args!("image     {}\n", s.image));
    match (s.container_id.as_str(), s.sandbox_status.as_str()) {
        (_, status) if !status.is_empty() => {
            con.out(format_args!("sandbox   unavailable: {status}\n"))
        }
        ("", _) => con.out(format_args!(
            "container (none yet; starts with the first command)\n"
        )),
        (id, _) => con.out(format_args!("container {}\n", prefix(id, 12))),
    }
}

fn print_read(con: &mut Stdio, r: &pb::ReadFileResponse, raw: bool) {
    if raw {
        con.out(format_args!("{}", r.content));
        return;
    }
    let width = r.last_line.to_string().len().max(4);
    for (i, line) in r.content.split_inclusive('\n').enumerate() {
        let end = if line.ends_with('\n') { "" } else { "\n" };
        con.out(format_args!(
            "{:>width$}  {line}{end}",
            r.first_line + i as u64
        ));
    }
    con.out(format_args!("-- {} (sha256 {})\n", r.message, r.sha256));
}

#[cfg(test)]
mod token_tests {
    use super::*;

    /// A state directory holding a token for `addr`.
    fn state_for(addr: std::net::SocketAddr) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TOKEN_FILE), "t0ken\n").unwrap();
        std::fs::write(dir.path().join(LISTEN_FILE), format!("{addr}\n")).unwrap();
        dir
    }

    #[test]
    fn the_local_token_goes_only_to_the_recorded_listener_of_its_owner() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let dir = state_for(addr);
        let url = |a: std::net::SocketAddr| format!("http://{a}");
        assert_eq!(
            local_token_in(dir.path(), &url(addr)).as_deref(),
            Some("t0ken")
        );
        // Another port, even a listening one of ours: not sent.
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(
            local_token_in(dir.path(), &url(other.local_addr().unwrap())),
            None
        );
        // A name instead of the address, or another host: not sent.
        assert_eq!(
            local_token_in(dir.path(), &format!("http://localhost:{}", addr.port())),
            None
        );
        assert_eq!(local_token_in(dir.path(), "https://example.com:443"), None);
        // The listener belongs to someone other than the token's owner
        // (say the service died and another user took its port): not sent.
        std::os::unix::fs::chown(dir.path().join(TOKEN_FILE), Some(65534), None).unwrap();
        assert_eq!(local_token_in(dir.path(), &url(addr)), None);
        let me = rustix::process::geteuid().as_raw();
        std::os::unix::fs::chown(dir.path().join(TOKEN_FILE), Some(me), None).unwrap();
        // Nobody listens there any more: not sent.
        drop(listener);
        assert_eq!(local_token_in(dir.path(), &url(addr)), None);
    }

    #[test]
    fn listener_owners_are_read_from_the_kernel() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert_eq!(
            listener_owner(addr),
            Some(rustix::process::geteuid().as_raw())
        );
        drop(listener);
        assert_eq!(listener_owner(addr), None);
    }
}
