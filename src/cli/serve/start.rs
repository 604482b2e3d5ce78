//! Start-up of `sandboxd serve`: from its flags to a running service. It
//! refuses an exposed listener without a token, makes a token for a
//! loopback port, binds before any slow image build, removes what an
//! earlier instance with the same name left, and stops at SIGTERM or
//! SIGINT.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use sandboxd::policy::guard::SlipGuard;
use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::sandbox::{Runtime, runsc};
use sandboxd::session::{Config, Registry, SandboxConfig};

use super::{ListenAddr, ServeArgs};
use crate::cli::AnyError;
use crate::cli::token::{LISTEN_FILE, TOKEN_FILE, make_token};

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
            .fmt_fields(crate::cli::logfmt::escaped())
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
    }
    let socket_group = socket_group(&args.listen, args.socket_group.as_deref())?;
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
    args.limits.apply(&mut sandbox);
    sandboxd::sandbox::file_table::check(
        &sandbox.default_limits,
        &sandbox.max_limits,
        args.max_sessions,
    );
    sandbox.pool_size = args.pool_size;
    sandbox.lent_pool_size = args.lent_pool_size;
    sandbox.environment_pools = args.pools.into_iter().collect();
    if args.exec_mode == "supervisor" {
        sandbox.supervisor = Some(std::env::current_exe()?);
        sandbox.socket_link = true;
    }
    sandbox.guard = SlipGuard::new(!args.no_guard, &args.guard_deny)?;
    let default_image = sandbox.default_image.clone();
    if default_image != sandboxd::sandbox::image::default_image() {
        config.builds.default_base = default_image.clone();
    }
    config.sandbox = sandbox;
    config.archives.min_rate = args.connections.min_rate();
    let build_token = args.builds.apply(&mut config)?;

    let token = match (token, &args.token_file) {
        (Some(t), _) => Some(super::secrets::checked(t, "token")?),
        (None, Some(file)) => Some(super::secrets::read(file, "token")?),
        (None, None) => None,
    };
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
    // Bind first so a taken port fails fast, before any slow image build.
    // Port 0 takes a free one: the log line below and the listen file name it.
    let (listener, socket_file): (sandboxd::server::Listener, _) = match &args.listen {
        ListenAddr::Tcp(addr) => (tokio::net::TcpListener::bind(addr).await?.into(), None),
        ListenAddr::Unix(path) => (
            super::socket::bind(path, socket_group.as_ref())?.into(),
            Some(path.clone()),
        ),
    };
    // A TCP port, even on loopback, is open to every local user: unless the
    // operator says otherwise, demand a token the service makes itself.
    let token = match (&listener, token) {
        (sandboxd::server::Listener::Tcp(l), None) if !args.no_token => {
            Some(make_token(&made_token_in, &l.local_addr()?)?)
        }
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
    // The handlers are in place before the service says it listens: a
    // SIGTERM sent once a client has been answered shuts it down cleanly
    // (token and listen files removed), never by the default action.
    let shutdown = shutdown_signal()?;
    match &listener {
        sandboxd::server::Listener::Tcp(l) => {
            tracing::info!(addr = %l.local_addr()?, tls = tls.is_some(), "sandboxd listening")
        }
        sandboxd::server::Listener::Unix(_) => {
            let group = socket_group.as_ref().map(|g| g.name.as_str());
            tracing::info!(socket = ?socket_file, group, "sandboxd listening")
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
        connections: args.connections.limits(),
    };
    let _web = match args.web_listen {
        Some(addr) => {
            if access.token.is_none() && matches!(listener, sandboxd::server::Listener::Unix(_)) {
                return Err(format!(
                    "--web-listen {addr}: this service has no token and listens on a Unix socket \
                     only its own user (or group) may use, while every local user can reach a \
                     loopback port: give it a token (--token-file) for the view's viewers to log \
                     in with"
                )
                .into());
            }
            if access.token.is_none() && !addr.ip().is_loopback() {
                return Err(format!(
                    "--web-listen {addr} is not a loopback address, and this service has no token \
                     its viewers could log in with: give it a token (--token-file) or a loopback \
                     address"
                )
                .into());
            }
            let web = tokio::net::TcpListener::bind(addr).await?;
            tracing::info!(addr = %web.local_addr()?, "web view at http://{}/", web.local_addr()?);
            let (registry, access) = (Arc::clone(&registry), access.clone());
            Some(AbortOnDrop(tokio::spawn(async move {
                sandboxd::server::serve_web(web, registry, &access).await
            })))
        }
        None => None,
    };
    let served =
        sandboxd::server::serve(listener, registry, Duration::from_secs(5), access, shutdown).await;
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

/// The group `--socket-group` names, resolved before anything starts; it
/// needs a Unix socket to own.
fn socket_group(
    listen: &ListenAddr,
    name: Option<&str>,
) -> Result<Option<super::socket::Group>, AnyError> {
    match (listen, name) {
        (_, None) => Ok(None),
        (ListenAddr::Unix(_), Some(name)) => super::socket::group(name).map(Some),
        (ListenAddr::Tcp(addr), Some(name)) => Err(format!(
            "--socket-group {name:?} needs a Unix socket to give the group (--listen unix:/PATH), \
             but the service listens on TCP {addr}"
        )
        .into()),
    }
}

/// A future that resolves at the first SIGTERM or SIGINT; the handlers are
/// installed before it is returned, not when it is first polled.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}
