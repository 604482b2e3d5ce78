//! Assembles and runs the gRPC server: the Sandbox service, the standard
//! health service, reflection (v1 and v1alpha, for grpcurl), and the idle
//! session reaper, over TCP (optionally TLS) or a Unix socket. On shutdown
//! every session is closed. Connections come through a
//! [`listener::Gate`] (`listener`); the metrics endpoint is `scrape`.

mod listener;
mod scrape;
mod streams;
mod throttle;
pub mod web;

pub use listener::{Admission, ConnectionLimits, raise_fd_limit};
pub use scrape::serve_metrics;
pub use web::serve_web;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tonic::service::interceptor::{InterceptedService, Interceptor};
use tonic::transport::{Identity, Server, ServerTlsConfig};

use crate::pb::{self, sandbox_server::SandboxServer};
use crate::service::{MayBuild, SandboxService};
use crate::session::{Caller, Registry};

/// Largest request or reply message: a 10 MiB file plus framing.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Authenticates each call by its bearer token and marks it with its
/// [`Caller`]: the service's token (compared in constant time) or its build
/// token makes the operator, whom a build token also marks as allowed to
/// build ([`MayBuild`]); an open session's token makes that session's
/// holder; anything else is refused. With no service token configured the
/// transport decides who may connect, and every caller is the operator.
#[derive(Clone)]
struct BearerAuth {
    expected: Option<Arc<Vec<u8>>>,
    build: Option<Arc<Vec<u8>>>,
    approver: Option<Arc<Vec<u8>>>,
    registry: Arc<Registry>,
}

impl BearerAuth {
    fn new(access: &Access, registry: Arc<Registry>) -> Self {
        let header = |t: &String| Arc::new(format!("Bearer {t}").into_bytes());
        BearerAuth {
            expected: access.token.as_ref().map(header),
            build: access.build_token.as_ref().map(header),
            approver: access.approver_token.as_ref().map(header),
            registry,
        }
    }

    fn caller(&self, given: &[u8]) -> Option<(Caller, bool)> {
        // Timing must tell nothing about either token.
        let builder = self
            .build
            .as_ref()
            .is_some_and(|b| crate::secret::constant_time_eq(given, b));
        let Some(expected) = &self.expected else {
            return Some((Caller::Admin, builder));
        };
        let approver = self
            .approver
            .as_ref()
            .is_some_and(|a| crate::secret::constant_time_eq(given, a));
        if builder || crate::secret::constant_time_eq(given, expected) {
            return Some((Caller::Admin, builder));
        }
        if approver {
            return Some((Caller::Approver, false));
        }
        let token = given.strip_prefix(b"Bearer ")?;
        let session = self.registry.session_of_token(token)?;
        Some((Caller::Session(session), false))
    }
}

impl Interceptor for BearerAuth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let given = req
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        let (caller, may_build) = self
            .caller(given)
            .ok_or_else(|| tonic::Status::from(crate::error::Error::Unauthenticated))?;
        vouch(&req, &caller);
        if may_build {
            req.extensions_mut().insert(MayBuild);
        }
        req.extensions_mut().insert(caller);
        Ok(req)
    }
}

/// A call carrying a valid token vouches for its connection (see
/// [`listener`]): it is no longer closed at the handshake deadline.
fn vouch(req: &tonic::Request<()>, caller: &Caller) {
    if let Some(admission) = req.extensions().get::<Admission>() {
        vouch_for(admission, caller);
    }
}

/// `caller`'s token vouches for the connection `admission` stands for.
fn vouch_for(admission: &Admission, caller: &Caller) {
    let session = match caller {
        Caller::Admin | Caller::Approver => None,
        Caller::Session(id) => Some(id.as_str()),
    };
    admission.vouch(session);
}

/// The health service is open to all; a health call carrying a valid
/// token vouches for its connection all the same (a probe that keeps its
/// connection open is not closed at the handshake deadline).
#[derive(Clone)]
struct VouchOnly(BearerAuth);

impl Interceptor for VouchOnly {
    fn call(&mut self, req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let given = req
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if let Some((caller, _)) = self.0.caller(given) {
            vouch(&req, &caller);
        }
        Ok(req)
    }
}

/// Where the service accepts connections.
#[derive(Debug)]
pub enum Listener {
    /// TCP (optionally with TLS).
    Tcp(TcpListener),
    /// A Unix domain socket: the file's permissions decide who may connect.
    Unix(UnixListener),
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Self {
        Listener::Tcp(l)
    }
}

impl From<UnixListener> for Listener {
    fn from(l: UnixListener) -> Self {
        Listener::Unix(l)
    }
}

/// Who may call: a bearer token every call must carry, and a TLS identity
/// (PEM certificate chain and key) the server presents.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Demanded on every Sandbox and reflection call; health stays open.
    pub token: Option<String>,
    /// The operator's build token: a call carrying it (instead of `token`)
    /// may also build and delete environments.
    pub build_token: Option<String>,
    /// The operator's approver token: a call carrying it may list and
    /// decide what waits for a person, and nothing else.
    pub approver_token: Option<String>,
    /// Serve TLS with this identity.
    pub tls: Option<TlsIdentity>,
    /// How many connections may be open, and how long one may stay
    /// before a call with a valid token vouches for it.
    pub connections: ConnectionLimits,
}

/// A PEM certificate chain and its private key.
#[derive(Clone)]
pub struct TlsIdentity {
    /// Certificate chain, leaf first.
    pub cert_pem: Vec<u8>,
    /// Private key.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsIdentity { .. }")
    }
}

/// How long a client may take over the TLS handshake (the handshake
/// deadline of [`ConnectionLimits`] bounds it too).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Descriptors kept for everything but connections (workspaces, engine
/// calls, journals, supervisor sockets, up to 1024 cgroup counter files)
/// when the open files limit is what bounds the connections.
const SPARE_FDS: u64 = 2048;

/// How often an idle connection is pinged, and how long its answer may
/// take: a peer that vanished without closing is dropped.
const KEEPALIVE: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(20));

/// How long open connections may finish after shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The reflection service could not be built from the descriptors.
    #[error("building the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The transport failed.
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Serves on `listener` until `shutdown` resolves, then closes all sessions.
///
/// With a token, every call to the Sandbox service and to reflection must
/// carry `authorization: Bearer <token>`; health checks stay open for probes.
pub async fn serve(
    listener: impl Into<Listener>,
    registry: Arc<Registry>,
    reap_interval: Duration,
    access: Access,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<SandboxServer<SandboxService>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let sandbox = SandboxServer::new(SandboxService::new(Arc::clone(&registry)))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let auth = BearerAuth::new(&access, Arc::clone(&registry));
    let sandbox = InterceptedService::new(sandbox, auth.clone());
    let reflection_v1alpha = InterceptedService::new(reflection_v1alpha, auth.clone());

    let reaper = tokio::spawn({
        let registry = Arc::clone(&registry);
        async move {
            let mut tick = tokio::time::interval(reap_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                registry.reap_expired().await;
                registry.fill_pool();
            }
        }
    });

    // Graceful shutdown waits for open connections; a client that never
    // hangs up must not keep the service (and its containers) alive.
    let (fired_tx, fired_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        let _ = fired_tx.send(());
    };
    let mut builder = Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE.0))
        .http2_keepalive_timeout(Some(KEEPALIVE.1))
        .max_concurrent_streams(streams::PER_CONNECTION)
        .layer(tower::util::MapResponseLayer::new(
            crate::error::describe_transport_refusal,
        ))
        .layer(streams::StreamBudgetLayer::new(
            auth.clone(),
            Arc::new(throttle::Throttle::new(registry.metrics())),
        ));
    if let Some(tls) = access.tls {
        builder = builder.tls_config(
            ServerTlsConfig::new()
                .identity(Identity::from_pem(tls.cert_pem, tls.key_pem))
                .timeout(TLS_HANDSHAKE_TIMEOUT),
        )?;
    }
    let health_service = InterceptedService::new(health_service, VouchOnly(auth.clone()));
    let router = builder
        .add_service(health_service)
        .add_service(InterceptedService::new(reflection.build_v1()?, auth))
        .add_service(reflection_v1alpha)
        .add_service(sandbox);
    type Serving = Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>>;
    let gate = listener::Gate::watching(
        fit_to_fd_limit(access.connections),
        session_liveness(&registry),
    );
    let server: Serving = match listener.into() {
        Listener::Tcp(l) => {
            Box::pin(router.serve_with_incoming_shutdown(listener::incoming(l, gate), shutdown))
        }
        Listener::Unix(l) => {
            Box::pin(router.serve_with_incoming_shutdown(listener::incoming(l, gate), shutdown))
        }
    };
    let grace_over = async move {
        if fired_rx.await.is_ok() {
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let result = tokio::select! {
        result = server => result,
        () = grace_over => {
            tracing::warn!("connections still open {SHUTDOWN_GRACE:?} after shutdown began; closing them");
            Ok(())
        }
    };
    reaper.abort();
    registry.close_all().await;
    Ok(result?)
}

/// Whether a session's voucher still holds: while the session is open.
fn session_liveness(registry: &Arc<Registry>) -> listener::Liveness {
    let registry = Arc::downgrade(registry);
    Arc::new(move |id: &str| registry.upgrade().is_some_and(|r| r.is_open(id)))
}

/// `limits`, with fewer connections if the open files limit could not
/// hold them and what the service needs besides.
fn fit_to_fd_limit(limits: ConnectionLimits) -> ConnectionLimits {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let Some(room) = soft.map(|s| s.saturating_sub(SPARE_FDS).max(16)) else {
        return limits;
    };
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    if limits.max <= room {
        return limits;
    }
    tracing::warn!(
        asked = limits.max,
        allowed = room,
        "the open files limit holds fewer connections than asked; raise it (ulimit -n) or lower --max-connections"
    );
    ConnectionLimits {
        max: room,
        ..limits
    }
}
