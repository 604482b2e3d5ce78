//! `sandboxd serve`: the service's flags and its start-up. The flags fill a
//! [`Config`] (their defaults are `session::defaults`, the same numbers the
//! library starts from); start-up refuses an exposed listener without a
//! token, makes a token for a loopback port, binds before any slow image
//! build, and removes what an earlier instance with the same name left.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use sandboxd::policy::guard::SlipGuard;
use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::sandbox::{Limits, Runtime, runsc};
use sandboxd::session::{Config, Registry, SandboxConfig, defaults};

mod approvals;

use super::token::{LISTEN_FILE, TOKEN_FILE, make_token};
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
    /// Warm containers kept ready for an environment, as NAME=N
    /// (repeatable, or comma-separated in the environment): its sessions
    /// then start as fast as default ones.
    #[arg(long = "pool", env = "SANDBOXD_POOLS", value_delimiter = ',', value_parser = parse_pool)]
    pools: Vec<(String, usize)>,
    /// Let every caller build and delete environments. Building runs the
    /// recipe's code with network access, so by default only calls
    /// carrying the build token may.
    #[arg(long, env = "SANDBOXD_ALLOW_BUILDS")]
    allow_builds: bool,
    /// File holding the build token: a call carrying it (as its bearer
    /// token) may build and delete environments, and do everything else.
    #[arg(long, env = "SANDBOXD_BUILD_TOKEN_FILE")]
    build_token_file: Option<PathBuf>,
    /// A CA bundle (PEM) that build steps trust, e.g. for a TLS-intercepting
    /// proxy: copied into each build stage and named by SSL_CERT_FILE,
    /// PIP_CERT, REQUESTS_CA_BUNDLE and the like during the build only.
    /// Give a whole bundle (the host's own, usually), not only the extra CA.
    /// The proxy variables of the service's environment (HTTP_PROXY,
    /// HTTPS_PROXY, NO_PROXY...) are handed to build steps as well.
    #[arg(long, env = "SANDBOXD_BUILD_CA_CERT")]
    build_ca_cert: Option<PathBuf>,
    /// Time an environment build may take unless the caller asks
    /// otherwise, in seconds.
    #[arg(long, env = "SANDBOXD_BUILD_TIMEOUT", default_value_t = defaults::BUILD_TIMEOUT_SECS)]
    build_timeout: u64,
    /// Ceiling on a build's requested time limit, in seconds.
    #[arg(long, env = "SANDBOXD_MAX_BUILD_TIMEOUT", default_value_t = defaults::MAX_BUILD_TIMEOUT_SECS)]
    max_build_timeout: u64,
    /// Bytes of build context (with the Dockerfile) a build may be sent.
    #[arg(long, env = "SANDBOXD_MAX_BUILD_CONTEXT_BYTES", default_value_t = defaults::BUILD_CONTEXT_BYTES,
          value_parser = clap::value_parser!(u64).range(1..=defaults::MAX_BUILD_CONTEXT_BYTES))]
    max_build_context_bytes: u64,
    /// Environment builds that run at once; more wait for a turn (within
    /// their time limit).
    #[arg(long, env = "SANDBOXD_MAX_BUILDS", default_value_t = defaults::MAX_RUNNING_BUILDS,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_builds: u64,
    /// Connections open at once; past it, a new connection takes the place
    /// of the oldest one no valid token has vouched for yet.
    #[arg(long, env = "SANDBOXD_MAX_CONNECTIONS", default_value_t = defaults::MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
    /// Seconds a connection has to make a call with a valid token (TLS and
    /// HTTP/2 handshakes included) before it is closed.
    #[arg(long, env = "SANDBOXD_HANDSHAKE_TIMEOUT", default_value_t = defaults::HANDSHAKE_SECS,
          value_parser = clap::value_parser!(u64).range(1..))]
    handshake_timeout: u64,
    /// Connections one session's token keeps open at once.
    #[arg(long, env = "SANDBOXD_SESSION_CONNECTIONS", default_value_t = defaults::SESSION_CONNECTIONS,
          value_parser = clap::value_parser!(u64).range(1..))]
    session_connections: u64,
    /// Bytes per second an upload or download must keep up (counted over
    /// the time it waits for its caller); 0 turns the bound off.
    #[arg(long, env = "SANDBOXD_TRANSFER_MIN_RATE", default_value_t = defaults::TRANSFER_MIN_RATE)]
    transfer_min_rate: u64,
    /// Seconds a transfer may fall behind --transfer-min-rate.
    #[arg(long, env = "SANDBOXD_TRANSFER_GRACE", default_value_t = defaults::TRANSFER_GRACE_SECS)]
    transfer_grace: u64,
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

/// Runs the service until SIGTERM or SIGINT; `token` is the one given by
/// `--token` or SANDBOXD_TOKEN.
pub async fn serve(args: ServeArgs, token: Option<String>) -> Result<ExitCode, AnyError> {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    if args.log_format == "json" {
        // The spans' fields (a session call's `session`) go on every line.
        tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    } else {
        tracing_subscriber::fmt()
            .fmt_fields(super::logfmt::escaped())
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
    }
    let state_dir = args
        .state_dir
        .unwrap_or_else(|| sandboxd::state::StateDir::default_path(&args.service_name));
    let mut config = Config::new(state_dir.clone());
    config.allowed_roots = args.allow_roots;
    config.default_ttl = Duration::from_secs(args.default_ttl);
    config.max_ttl = Duration::from_secs(args.max_ttl);
    config.max_sessions = args.max_sessions;
    config.rules.deny_writes = args.deny_writes;
    let approver_token = args.approvals.apply(&mut config)?;
    config.journal_dir = args.journal_dir;
    config.journal_max_bytes = args.journal_max_bytes;
    config.durable = true;
    let metrics = args
        .metrics_listen
        .map(|addr| (addr, Arc::new(sandboxd::metrics::Metrics::new())));
    config.metrics = metrics.as_ref().map(|(_, m)| Arc::clone(m));
    config.limits.max_file_bytes = args.max_file_bytes;
    let mut sandbox = SandboxConfig::new(&args.service_name);
    if let Some(image) = args.image {
        sandbox.default_image = image;
    }
    sandbox.allowed_images = args.allow_images;
    if let Some(user) = args.command_user {
        sandbox.default_user = user;
    }
    let wants_runsc = args.container_runtime.as_deref() == Some(runsc::NAME);
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
    sandbox.environment_pools = args.pools.into_iter().collect();
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
    if default_image != sandboxd::sandbox::image::default_image() {
        config.builds.default_base = default_image.clone();
    }
    config.sandbox = sandbox;
    config.allow_builds = args.allow_builds;
    config.builds.timeout = Duration::from_secs(args.build_timeout);
    config.builds.max_timeout = Duration::from_secs(args.max_build_timeout);
    config.builds.max_context_bytes = args.max_build_context_bytes;
    config.builds.max_running = usize::try_from(args.max_builds).unwrap_or(usize::MAX);
    config.archives.min_rate = sandboxd::session::MinRate {
        bytes_per_sec: args.transfer_min_rate,
        grace: Duration::from_secs(args.transfer_grace),
    };
    if let Some(path) = &args.build_ca_cert {
        let pem = std::fs::read(path)
            .map_err(|e| format!("cannot read the build CA {}: {e}", path.display()))?;
        if !pem.starts_with(b"-----BEGIN")
            && !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----")
        {
            return Err(format!("{} holds no PEM certificate", path.display()).into());
        }
        config.builds.ca_cert = Some(pem);
    }
    config.builds.proxy = sandboxd::environment::PROXY_VARIABLES
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let build_token = match &args.build_token_file {
        Some(file) => {
            let t = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read the build token file {}: {e}", file.display()))?
                .trim()
                .to_string();
            if t.is_empty() {
                return Err("the build token is empty".into());
            }
            Some(t)
        }
        None => None,
    };

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
    let docker = Arc::new(DockerRuntime::with_timeout(
        args.docker_host,
        Duration::from_secs(args.engine_timeout),
    ));
    let runtime: Arc<dyn Runtime> = docker.clone();
    // The registry takes the state directory's instance lock before
    // anything is written there: a second instance is refused with the
    // live one's token and address untouched.
    let made_token_in = config.state_dir.clone();
    let registry = Arc::new(Registry::new(config, runtime.clone())?);
    // A TCP port, even on loopback, is open to every local user: unless the
    // operator says otherwise, demand a token the service makes itself.
    let token = match (&args.listen, token) {
        (ListenAddr::Tcp(addr), None) if !args.no_token => Some(make_token(&made_token_in, addr)?),
        (_, token) => token,
    };
    // Sessions an earlier instance left open come back before anything is
    // swept, so their workspaces are never taken for leftovers.
    let back = registry.recover().await;
    if !back.is_empty() {
        tracing::info!(
            sessions = back.len(),
            "sessions brought back from the state directory"
        );
    }
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
            if wants_runsc {
                // Asked for gVisor: without it, start nothing rather than
                // fail every command later.
                runsc::ensure_registered(&docker).await?;
            }
            // The built-in image is built if missing and its stable alias
            // pointed at it (an image from an earlier version may lack it);
            // an operator's own image is only checked.
            let ready = if default_image == sandboxd::sandbox::image::default_image() {
                docker.build_default_image().await.map(|_| ())
            } else {
                runtime.ensure_image(&default_image).await
            };
            if let Err(e) = ready {
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
    let _metrics = match metrics {
        Some((addr, _)) => {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            tracing::info!(addr = %listener.local_addr()?, "metrics at /metrics");
            Some(AbortOnDrop(tokio::spawn(sandboxd::server::serve_metrics(
                listener,
                Arc::clone(&registry),
            ))))
        }
        None => None,
    };
    match &listener {
        sandboxd::server::Listener::Tcp(l) => {
            tracing::info!(addr = %l.local_addr()?, tls = tls.is_some(), "sandboxd listening")
        }
        sandboxd::server::Listener::Unix(_) => {
            tracing::info!(socket = ?socket_file, "sandboxd listening")
        }
    }
    if build_token.is_some() && build_token == token {
        return Err("the build token must differ from the token every call carries".into());
    }
    if approver_token.is_some() && (approver_token == token || approver_token == build_token) {
        return Err("the approver token must differ from the service's and the build token".into());
    }
    if approver_token.is_some() && token.is_none() {
        return Err(
            "--approver-token-file needs a service token: without one every caller is the operator"
                .into(),
        );
    }
    // Connections run out at --max-connections, not at a low soft limit.
    let fds = sandboxd::server::raise_fd_limit();
    tracing::debug!(open_files_limit = ?fds, "open files limit");
    let access = sandboxd::server::Access {
        token,
        build_token,
        approver_token,
        tls,
        connections: sandboxd::server::ConnectionLimits {
            max: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
            handshake: Duration::from_secs(args.handshake_timeout),
            per_session: usize::try_from(args.session_connections).unwrap_or(usize::MAX),
        },
    };
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
    // Containers the engine failed to remove are tried once more; what is
    // still there is removed by the next start over this state directory.
    let left = docker.finish_removals(Duration::from_secs(5)).await;
    if !left.is_empty() {
        tracing::error!(containers = ?left, "the engine did not remove these containers; the next start removes them");
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

/// Ends a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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

/// Resolves at the first SIGTERM or SIGINT.
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

/// "UID:GID", both numbers, neither root's.
fn parse_user(s: &str) -> Result<(u32, u32), String> {
    let (uid, gid) = s.split_once(':').ok_or("expected UID:GID")?;
    let id = |n: &str| n.parse::<u32>().map_err(|e| format!("{n:?}: {e}"));
    match (id(uid)?, id(gid)?) {
        (0, _) | (_, 0) => Err("commands never run as root".into()),
        user => Ok(user),
    }
}
