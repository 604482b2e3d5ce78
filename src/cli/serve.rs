//! `sandboxd serve`: the service's flags. They fill a `Config` (their
//! defaults are `session::defaults`, the same numbers the library starts
//! from). Groups of flags are their own `Args` in `serve/` (approvals,
//! builds, connections, limits); `socket` binds a Unix socket; `start` is
//! the start-up.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use sandboxd::session::defaults;

mod approvals;
mod builds;
mod connections;
mod limits;
mod secrets;
mod socket;
mod start;

pub use start::serve;

use super::{AnyError, SERVICE_NAME_ENV};

/// Where `serve` listens.
#[derive(Debug, Clone)]
enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// Parses `--listen`: HOST:PORT or unix:/PATH.
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

/// Parses `--pool NAME=N`.
fn parse_pool(s: &str) -> Result<(String, usize), String> {
    let (name, n) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=N"))?;
    sandboxd::environment::check_name(name).map_err(|e| e.to_string())?;
    let n = n
        .parse()
        .map_err(|e| format!("{s:?}: {n:?} is not a count: {e}"))?;
    Ok((name.to_string(), n))
}

/// The flags of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on: HOST:PORT (port 0 takes a free one, named in
    /// the log), or unix:/PATH for a Unix socket (mode 0600: only this user
    /// may connect, unless --socket-group). A non-loopback TCP address
    /// requires a token.
    #[arg(long, env = "SANDBOXD_LISTEN", default_value = defaults::LISTEN, value_parser = parse_listen)]
    listen: ListenAddr,
    /// Group whose members may use the Unix socket of --listen unix:/PATH:
    /// the socket is made mode 0660 and owned by this group (a name from
    /// the system's group database, e.g. made with `groupadd --system
    /// sandboxd`). Its members are operators: over the socket they need no
    /// token (unless --token-file sets one) and may drive every session, as
    /// members of the docker group may with Docker's socket.
    #[arg(long, env = "SANDBOXD_SOCKET_GROUP")]
    socket_group: Option<String>,
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
    /// People in the loop: ask rules and approvers.
    #[command(flatten)]
    approvals: approvals::ApprovalArgs,
    /// Directory where each session's journal is appended as JSON lines
    /// (<dir>/<session id>.jsonl), for external audit.
    #[arg(long, env = "SANDBOXD_JOURNAL_DIR")]
    journal_dir: Option<PathBuf>,
    /// Ceiling in bytes of one session's journal files together (at least
    /// 64 KiB): past half of it the file is rotated, the older half dropped
    /// and counted.
    #[arg(long, env = "SANDBOXD_JOURNAL_MAX_BYTES", default_value_t = sandboxd::journal::DEFAULT_MAX_FILE_BYTES,
          value_parser = clap::value_parser!(u64).range(65_536..))]
    journal_max_bytes: u64,
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
    #[arg(long, env = SERVICE_NAME_ENV, default_value = defaults::SERVICE_NAME)]
    service_name: String,
    /// Serve Prometheus metrics at http://ADDR/metrics (off by default;
    /// counts only, no session ids or paths: keep it on loopback or a
    /// network only the monitoring reaches).
    #[arg(long, env = "SANDBOXD_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Serve a read-only web view of the sessions at http://ADDR/ (off by
    /// default). Viewers log in once with the service's token (every
    /// session) or a session's token (that session); a service without a
    /// token serves it on a loopback address only.
    #[arg(long, env = "SANDBOXD_WEB_LISTEN")]
    web_listen: Option<std::net::SocketAddr>,
    /// Log lines as plain text or as JSON objects (one per line, with the
    /// session's id on each line logged for a session's call).
    #[arg(long, env = "SANDBOXD_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Docker daemon address (default: DOCKER_HOST or the local socket).
    #[arg(long, env = "SANDBOXD_DOCKER_HOST")]
    docker_host: Option<String>,
    /// Seconds an engine call may take to answer: an engine that takes
    /// calls and never answers fails them in this time (a new session is
    /// then refused with SANDBOX_UNAVAILABLE, leaving nothing behind).
    #[arg(long, env = "SANDBOXD_ENGINE_TIMEOUT", default_value_t = sandboxd::sandbox::docker::DEFAULT_ENGINE_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    engine_timeout: u64,
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
    // The default is the library's, written once.
    #[arg(
        long,
        env = "SANDBOXD_COMMAND_USER",
        value_parser = parse_user,
        help = format!(
            "\"UID:GID\" commands run as where the workspace is root's: an id no host \
             account has, since an account with it could reach running commands \
             [default: {}:{}]",
            defaults::COMMAND_USER.0,
            defaults::COMMAND_USER.1
        )
    )]
    command_user: Option<(u32, u32)>,
    /// Container runtime, e.g. runsc for gVisor (default: the engine's).
    #[arg(long, env = "SANDBOXD_CONTAINER_RUNTIME")]
    container_runtime: Option<String>,
    /// Command and container limits.
    #[command(flatten)]
    limits: limits::LimitArgs,
    /// How commands run: `supervisor` (one long-lived supervisor per
    /// container, this binary mounted read-only; falls back to `exec` when
    /// it cannot start) or `exec` (one Docker exec per command).
    #[arg(long, env = "SANDBOXD_EXEC_MODE", default_value = "supervisor", value_parser = ["supervisor", "exec"])]
    exec_mode: String,
    /// Warm containers kept ready so a session with a fresh workspace (and
    /// the default image and limits) starts without waiting for Docker.
    #[arg(long, env = "SANDBOXD_POOL_SIZE", default_value_t = defaults::POOL_SIZE)]
    pool_size: usize,
    /// Warm containers kept ready so a session over an existing directory
    /// (with the default image and limits) starts without waiting for
    /// Docker: each is lent its directory when a session takes it. Only
    /// where the service runs as root (it mounts the directory for them).
    #[arg(long, env = "SANDBOXD_LENT_POOL_SIZE", default_value_t = defaults::LENT_POOL_SIZE)]
    lent_pool_size: usize,
    /// Warm containers kept ready for an environment, as NAME=N
    /// (repeatable, or comma-separated in the environment): its sessions
    /// then start as fast as default ones.
    #[arg(long = "pool", env = "SANDBOXD_POOLS", value_delimiter = ',', value_parser = parse_pool)]
    pools: Vec<(String, usize)>,
    /// Environment builds.
    #[command(flatten)]
    builds: builds::BuildArgs,
    /// Connections and transfers.
    #[command(flatten)]
    connections: connections::ConnectionArgs,
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

/// "UID:GID", both numbers, neither root's.
fn parse_user(s: &str) -> Result<(u32, u32), String> {
    let (uid, gid) = s.split_once(':').ok_or("expected UID:GID")?;
    let id = |n: &str| n.parse::<u32>().map_err(|e| format!("{n:?}: {e}"));
    match (id(uid)?, id(gid)?) {
        (0, _) | (_, 0) => Err("commands never run as root".into()),
        user => Ok(user),
    }
}
