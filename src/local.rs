//! A private sandboxd on 127.0.0.1 (an ephemeral port), started in-process
//! for `demo` and `bench`, driven over real gRPC like any client would.

use std::sync::Arc;
use std::time::Duration;

use sandboxd::pb::sandbox_client::SandboxClient;
use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::session::{Config, Registry, SandboxConfig};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// A running private service.
pub struct Local {
    /// A client connected to it.
    pub client: SandboxClient<Channel>,
    /// Its registry (to observe the warm pool).
    pub registry: Arc<Registry>,
    /// Its Docker runtime (for baselines measured against the same daemon).
    pub docker: Arc<DockerRuntime>,
    stop: oneshot::Sender<()>,
    server: JoinHandle<Result<(), sandboxd::server::ServeError>>,
    _state: TempDir,
}

impl Local {
    /// Starts a service named `name` with the supervisor and a warm pool of
    /// `pool_size`, building the default image first if needed.
    pub async fn start(
        name: &str,
        pool_size: usize,
        tweak: impl FnOnce(&mut Config),
    ) -> Result<Local, AnyError> {
        let state = tempfile::tempdir()?;
        let mut config = Config::new(state.path().join("state"));
        config.sandbox = SandboxConfig::new(&format!("sandboxd-{name}-{}", std::process::id()));
        config.sandbox.supervisor = Some(std::env::current_exe()?);
        config.sandbox.socket_link = true;
        config.sandbox.pool_size = pool_size;
        tweak(&mut config);
        let docker = Arc::new(DockerRuntime::new(None));
        eprintln!("preparing the sandbox image (built once, about a minute the first time)...");
        docker.build_default_image().await?;
        let registry = Arc::new(Registry::new(config, docker.clone())?);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(sandboxd::server::serve(
            listener,
            Arc::clone(&registry),
            Duration::from_secs(5),
            sandboxd::server::Access::default(),
            async {
                let _ = stopped.await;
            },
        ));
        let channel = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        let client = SandboxClient::new(channel)
            .max_decoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES);
        Ok(Local {
            client,
            registry,
            docker,
            stop,
            server,
            _state: state,
        })
    }

    /// Stops the service; it closes every session and removes its
    /// containers and workspaces.
    pub async fn stop(self) -> Result<(), AnyError> {
        let _ = self.stop.send(());
        self.server.await??;
        Ok(())
    }
}
