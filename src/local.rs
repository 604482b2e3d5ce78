//! An embedded private sandboxd: the whole service inside the calling
//! process, listening on 127.0.0.1 (an ephemeral port), keeping its state in
//! a temporary directory, and driven over real gRPC like any client would.
//!
//! `sandboxd demo` and `sandboxd bench` start one, and so do the integration
//! tests and any front end that wants the service without a daemon to run.
//! One place builds it, so all of them exercise the same service, set up the
//! same way: the same state directory layout, the same server, the same
//! client limits. Stopping it closes every session and removes their
//! containers and workspaces.
//!
//! Every local user can reach a loopback port, so a service that works on
//! somebody's files ([`Local::start`], [`Builder::private`]) demands a
//! fresh random token that only its own client holds.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::pb::sandbox_client::SandboxClient;
use crate::sandbox::docker::DockerRuntime;
use crate::server::{Access, ServeError};
use crate::session::{Config, Registry, SandboxConfig, StartError};

/// A client of the service that sends its bearer token, if any, on every
/// call.
pub type Client = SandboxClient<InterceptedService<Channel, Bearer>>;

/// Adds `authorization: Bearer <token>` to every call (nothing without a
/// token).
#[derive(Clone, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    /// The header for `token`; `None` when the token has characters a
    /// header cannot carry.
    pub fn new(token: Option<&str>) -> Option<Bearer> {
        match token {
            None => Some(Bearer(None)),
            Some(t) => format!("Bearer {t}").parse().ok().map(|v| Bearer(Some(v))),
        }
    }
}

impl tonic::service::Interceptor for Bearer {
    /// A call that carries its own credentials keeps them.
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0
            && !req.metadata().contains_key("authorization")
        {
            req.metadata_mut().insert("authorization", value.clone());
        }
        Ok(req)
    }
}

/// A client over `channel` that sends `bearer` and accepts messages as
/// large as the service sends.
pub fn client(channel: Channel, bearer: Bearer) -> Client {
    SandboxClient::with_interceptor(channel, bearer)
        .max_decoding_message_size(crate::server::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(crate::server::MAX_MESSAGE_BYTES)
}

/// Why a private service cannot start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The temporary directory, this executable or the listening socket
    /// cannot be had.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The default sandbox image cannot be built.
    #[error(transparent)]
    BuildImage(crate::sandbox::Error),
    /// The registry refuses its configuration or state directory.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The client cannot reach the service.
    #[error(transparent)]
    Connect(#[from] tonic::transport::Error),
    /// The server failed.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The server's task panicked or was cancelled.
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
}

/// A running private service.
pub struct Local {
    /// A client connected to it.
    pub client: Client,
    /// The channel that client uses, for clients with other tokens.
    pub channel: Channel,
    /// Where it listens.
    pub addr: SocketAddr,
    /// The token it demands, if it is private ([`Builder::private`]).
    pub token: Option<String>,
    /// Its registry (to observe the warm pool).
    pub registry: Arc<Registry>,
    /// Its Docker runtime (for baselines measured against the same daemon).
    pub docker: Arc<DockerRuntime>,
    /// Its service name: every container it starts is labelled
    /// `sandboxd.service=<service>`.
    pub service: String,
    stop: oneshot::Sender<()>,
    server: JoinHandle<Result<(), ServeError>>,
    home: Home,
}

/// Where a private service keeps its state.
enum Home {
    /// A temporary directory, removed when dropped.
    Temp(TempDir),
    /// A directory among its kind's (see [`Local::builder_in`]), marked
    /// live by a lock held as long as the service, removed by
    /// [`Local::stop`] or, after a crash, by [`sweep_dead`].
    Kept { path: PathBuf, _live: OwnedFd },
}

impl Home {
    fn path(&self) -> &Path {
        match self {
            Home::Temp(dir) => dir.path(),
            Home::Kept { path, .. } => path,
        }
    }
}

/// How a [`Local`] is set up; [`Local::builder`] makes one.
pub struct Builder {
    home: Home,
    config: Config,
    docker: Option<Arc<DockerRuntime>>,
    build_image: bool,
    access: Access,
    /// The client holds the token ([`Builder::private`]).
    private: bool,
    reap_interval: Duration,
}

impl Local {
    /// Starts a private service named `name` with this executable as the
    /// supervisor (it is the static `sandboxd` binary) and a warm pool of
    /// `pool_size`, building the default image first if needed.
    pub async fn start(
        name: &str,
        pool_size: usize,
        tweak: impl FnOnce(&mut Config),
    ) -> Result<Local, Error> {
        let builder = Local::builder(&format!("sandboxd-{name}-{}", std::process::id()))?
            .supervisor(std::env::current_exe()?)
            .private()
            .configure(|config| {
                config.sandbox.pool_size = pool_size;
                tweak(config);
            });
        eprintln!("preparing the sandbox image (built once, about a minute the first time)...");
        builder.start().await
    }

    /// A service whose containers carry `sandboxd.service=<service>`, with
    /// its state in a fresh private temporary directory (made now, so that
    /// [`Builder::configure`] sees the final configuration). It starts from
    /// the operator defaults: the local Docker daemon, commands as one
    /// Docker exec each, no warm pool, no token.
    pub fn builder(service: &str) -> Result<Builder, Error> {
        Ok(Self::with_home(service, Home::Temp(tempfile::tempdir()?)))
    }

    /// A service keeping its state in `parent/<service>` (made private),
    /// marked live by a lock its process holds: a later caller of
    /// [`sweep_dead`] over `parent` removes what it leaves if it dies
    /// without stopping. Refused while a live service has that name.
    pub fn builder_in(service: &str, parent: &Path) -> Result<Builder, Error> {
        let path = parent.join(service);
        let home = crate::state::StateDir::open(&path).map_err(std::io::Error::other)?;
        let live = home.try_lock(LIVE)?.ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "a live service named {service} keeps its state in {}",
                    path.display()
                ),
            )
        })?;
        Ok(Self::with_home(service, Home::Kept { path, _live: live }))
    }

    fn with_home(service: &str, home: Home) -> Builder {
        let mut config = Config::new(home.path().join("state"));
        config.sandbox = SandboxConfig::new(service);
        Builder {
            home,
            config,
            docker: None,
            build_image: true,
            access: Access::default(),
            private: false,
            reap_interval: Duration::from_secs(5),
        }
    }

    /// The temporary directory the service lives in: its state directory
    /// is `state` inside, and every workspace volume it mounts is below.
    pub fn dir(&self) -> &Path {
        self.home.path()
    }

    /// The service's private state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.home.path().join("state")
    }

    /// Stops the service; it closes every session and removes its
    /// containers and workspaces.
    pub async fn stop(self) -> Result<(), Error> {
        let _ = self.stop.send(());
        self.server.await??;
        if let Home::Kept { path, .. } = &self.home {
            // Never enters a pin: each is let go of first.
            let_go_of_pins(&path.join("state"))?;
            crate::workspace::remove::remove_tree(path).map_err(std::io::Error::other)?;
        }
        Ok(())
    }
}

impl Builder {
    /// Changes the configuration: anything the knobs below do not cover.
    /// Applied at once, in order with the knobs.
    pub fn configure(mut self, tweak: impl FnOnce(&mut Config)) -> Self {
        tweak(&mut self.config);
        self
    }

    /// Runs commands through the in-container supervisor: `binary` is the
    /// static `sandboxd` mounted into each container. It connects back over
    /// a Unix socket in the state directory (see [`Builder::socket_link`]).
    pub fn supervisor(self, binary: impl Into<PathBuf>) -> Self {
        let binary = binary.into();
        self.configure(|config| {
            config.sandbox.supervisor = Some(binary);
            config.sandbox.socket_link = true;
        })
    }

    /// Whether the supervisor connects back over a Unix socket (`true`, the
    /// default with a supervisor) or speaks over its exec's stdio (`false`:
    /// the path for a Docker host that cannot share a directory with the
    /// service).
    pub fn socket_link(self, socket: bool) -> Self {
        self.configure(|config| config.sandbox.socket_link = socket)
    }

    /// The Docker engine to use (default: the local daemon, found as the
    /// Docker CLI would).
    pub fn docker(mut self, docker: Arc<DockerRuntime>) -> Self {
        self.docker = Some(docker);
        self
    }

    /// Whether to build the default image before serving when it is missing
    /// (default: yes). Without it a service starts even when the engine is
    /// down; its sessions then have no container, and the file tools work.
    pub fn build_image(mut self, build: bool) -> Self {
        self.build_image = build;
        self
    }

    /// Who may call (default: anyone who can reach the port).
    pub fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// Demands a fresh random token on every call, which only
    /// [`Local::client`] (and whoever is handed [`Local::token`]) holds.
    pub fn private(mut self) -> Self {
        self.access.token = Some(crate::secret::random_hex());
        self.private = true;
        self
    }

    /// How often idle sessions are looked for and closed (default: 5 s).
    pub fn reap_interval(mut self, every: Duration) -> Self {
        self.reap_interval = every;
        self
    }

    /// Starts the service and connects a client to it.
    pub async fn start(self) -> Result<Local, Error> {
        let Builder {
            home,
            config,
            docker,
            build_image,
            access,
            private,
            reap_interval,
        } = self;
        let docker = docker.unwrap_or_else(|| Arc::new(DockerRuntime::new(None)));
        if build_image {
            docker
                .build_default_image()
                .await
                .map_err(Error::BuildImage)?;
        }
        let service = config.sandbox.service.clone();
        // Only a private service's client holds its token; callers of a
        // service with a token of theirs send it themselves.
        let token = access.token.clone().filter(|_| private);
        let bearer = Bearer::new(token.as_deref()).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the token has characters a header cannot carry",
            )
        })?;
        let registry = Arc::new(Registry::new(config, docker.clone())?);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(crate::server::serve(
            listener,
            Arc::clone(&registry),
            reap_interval,
            access,
            async {
                let _ = stopped.await;
            },
        ));
        let channel = Endpoint::try_from(format!("http://{addr}"))?
            .connect()
            .await?;
        Ok(Local {
            client: client(channel.clone(), bearer),
            channel,
            addr,
            token,
            registry,
            docker,
            service,
            stop,
            server,
            home,
        })
    }
}

/// The lock a kept service holds while it lives.
const LIVE: &str = "live.lock";

/// Removes what services kept in `parent` (see [`Local::builder_in`]) left
/// when they died without stopping: their containers, the workspaces and
/// pins they mounted, their state. A service whose process lives (it holds
/// its lock) is left alone, whatever its name. Returns the names swept.
pub async fn sweep_dead(parent: &Path, docker: Arc<DockerRuntime>) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut swept = Vec::new();
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let path = entry.path();
        let home = match crate::state::StateDir::open(&path) {
            Ok(home) => home,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "not a private service's state: left alone");
                continue;
            }
        };
        let Ok(Some(_dead)) = home.try_lock(LIVE) else {
            continue;
        };
        let mut config = Config::new(path.join("state"));
        config.sandbox = SandboxConfig::new(&name);
        match Registry::new(config, docker.clone()) {
            Ok(registry) => {
                if let Err(e) = registry.sweep_leaked().await {
                    tracing::warn!(service = %name, error = ?e, "its containers could not all be removed");
                    continue;
                }
            }
            Err(e) => {
                tracing::warn!(service = %name, error = %e, "its state could not be opened");
                continue;
            }
        }
        // The pins go first, each unmounted and then removed only if empty:
        // a lent directory is never entered, whatever filesystem it is on.
        if let Err(e) = let_go_of_pins(&path.join("state")) {
            tracing::warn!(service = %name, error = %e, "a pin of its could not be let go of; its state is left in place");
            continue;
        }
        match crate::workspace::remove::remove_tree(&path) {
            Ok(()) => {
                tracing::info!(service = %name, "removed what a dead private service left");
                swept.push(name);
            }
            Err(e) => {
                tracing::warn!(service = %name, error = %e, "its state could not all be removed")
            }
        }
    }
    swept
}

/// Unmounts every pin under the state directory `state` (each as many
/// times as mounts are stacked on it, within a bound) and removes its
/// mount point, which must then be an empty directory on the same mount as
/// `pins` itself (the mount ids are compared, not the devices: a bind
/// mount of a directory on the same filesystem shares its device). Any pin
/// that is still a mount point, or not empty, fails the whole: whoever
/// removes the state directory after this never enters a lent directory.
fn let_go_of_pins(state: &Path) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};
    const MAX_STACKED: usize = 64;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let pins_path = state.join("pins");
    let pins = match rustix::fs::open(&pins_path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mount_id = |name: &std::ffi::CStr| -> std::io::Result<u64> {
        Ok(
            rustix::fs::statx(&pins, name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::MNT_ID)?
                .stx_mnt_id,
        )
    };
    let own = mount_id(c".")?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&pins)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            names.push(name.to_owned());
        }
    }
    for name in names {
        let path = pins_path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        for _ in 0..MAX_STACKED {
            if mount_id(&name)? == own {
                break;
            }
            match rustix::mount::unmount(
                &path,
                rustix::mount::UnmountFlags::DETACH | rustix::mount::UnmountFlags::NOFOLLOW,
            ) {
                Ok(()) | Err(rustix::io::Errno::INVAL) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if mount_id(&name)? != own {
            return Err(std::io::Error::other(format!(
                "{} is still a mount point",
                path.display()
            )));
        }
        match rustix::fs::unlinkat(&pins, &name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => {
                return Err(std::io::Error::other(format!(
                    "cannot remove the pin {}: {e}",
                    path.display()
                )));
            }
        }
    }
    Ok(())
}
