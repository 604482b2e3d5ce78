//! In-process server on 127.0.0.1:0 and helpers shared by the gRPC tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandboxd::pb::{self, sandbox_client::SandboxClient};
use sandboxd::sandbox::Runtime;
use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::session::{Config, Registry, SandboxConfig};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tonic::transport::Channel;
use tonic_types::StatusExt;

pub type Client = SandboxClient<Channel>;

/// A running server with its own workspace directory and one allowed root.
pub struct TestServer {
    pub client: Client,
    pub addr: std::net::SocketAddr,
    /// Operators allow existing directories under this root.
    pub allowed_root: TempDir,
    workspaces: TempDir,
    /// Containers of this server carry `sandboxd.service=<service>`.
    pub service: String,
    /// The server's registry (to observe the warm pool).
    pub registry: Arc<Registry>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// How commands reach the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Through the in-container supervisor over its Unix socket (the default).
    Supervisor,
    /// Through the supervisor over the exec's stdio (remote Docker).
    SupervisorStdio,
    /// One Docker exec per command (the fallback).
    Exec,
    /// Containers under gVisor (`--runtime runsc`), through the supervisor.
    Gvisor,
}

/// A Docker host where no daemon listens: file-tool tests run without
/// containers (and show that file tools work when the engine is down).
pub const NO_DOCKER: &str = "unix:///nonexistent/sandboxd-test-docker.sock";

impl TestServer {
    /// A server for file-tool tests: its container engine is unreachable.
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
        Self::build(Arc::new(DockerRuntime::new(Some(NO_DOCKER.into()))), tweak).await
    }

    /// A server over the real Docker daemon (with the default image built),
    /// running commands through the in-container supervisor.
    pub async fn with_docker() -> TestServer {
        Self::with_docker_mode_and(Mode::Supervisor, |_| {}).await
    }

    pub async fn with_docker_mode(mode: Mode) -> TestServer {
        Self::with_docker_mode_and(mode, |_| {}).await
    }

    pub async fn with_docker_mode_and(mode: Mode, tweak: impl FnOnce(&mut Config)) -> TestServer {
        let docker = Arc::new(DockerRuntime::new(None));
        if let Err(e) = docker.ping().await {
            panic!("these tests need a running Docker daemon (docker info must answer): {e}");
        }
        if mode == Mode::Gvisor {
            let runtimes = std::process::Command::new("docker")
                .args(["info", "--format", "{{json .Runtimes}}"])
                .output()
                .expect("docker CLI");
            assert!(
                String::from_utf8_lossy(&runtimes.stdout).contains("\"runsc\""),
                "the gVisor tests need runsc registered with the Docker daemon \
                 (apt-get install runsc; add it to /etc/docker/daemon.json \"runtimes\" with \
                 \"runtimeArgs\": [\"--network=none\"]; .ci/run does this)"
            );
        }
        docker
            .build_default_image()
            .await
            .unwrap_or_else(|e| panic!("cannot build the default sandbox image: {e}"));
        Self::build(docker, |config| {
            config.sandbox.supervisor = match mode {
                Mode::Supervisor | Mode::SupervisorStdio | Mode::Gvisor => {
                    Some(env!("CARGO_BIN_EXE_sandboxd").into())
                }
                Mode::Exec => None,
            };
            config.sandbox.socket_link = matches!(mode, Mode::Supervisor | Mode::Gvisor);
            if mode == Mode::Gvisor {
                config.sandbox.runtime = Some("runsc".into());
            }
            tweak(config)
        })
        .await
    }

    /// A file-tools server that demands `authorization: Bearer <token>`.
    pub async fn with_token(token: &str) -> TestServer {
        Self::build_with(
            Arc::new(DockerRuntime::new(Some(NO_DOCKER.into()))),
            |_| {},
            sandboxd::server::Access {
                token: Some(token.to_string()),
                tls: None,
            },
        )
        .await
    }

    async fn build(runtime: Arc<dyn Runtime>, tweak: impl FnOnce(&mut Config)) -> TestServer {
        Self::build_with(runtime, tweak, sandboxd::server::Access::default()).await
    }

    async fn build_with(
        runtime: Arc<dyn Runtime>,
        tweak: impl FnOnce(&mut Config),
        access: sandboxd::server::Access,
    ) -> TestServer {
        let workspaces = tempfile::tempdir().unwrap();
        let allowed_root = tempfile::tempdir().unwrap();
        // Lent directories must be private to their owner (tempfile makes
        // directories 0755).
        std::fs::set_permissions(
            allowed_root.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let mut config = Config::new(workspaces.path().join("state"));
        config.allowed_roots = vec![allowed_root.path().to_path_buf()];
        let service = format!(
            "sandboxd-test-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        );
        config.sandbox = SandboxConfig::new(&service);
        tweak(&mut config);
        let registry = Arc::new(Registry::new(config, runtime).unwrap());
        let server_registry = Arc::clone(&registry);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            sandboxd::server::serve(
                listener,
                server_registry,
                Duration::from_millis(100),
                access,
                async {
                    let _ = stopped.await;
                },
            )
            .await
            .unwrap();
        });
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let client = SandboxClient::new(channel)
            .max_decoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES);
        TestServer {
            client,
            addr,
            allowed_root,
            workspaces,
            service,
            registry,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Opens a session over a fresh workspace; returns (id, host path).
    pub async fn session(&self) -> (String, PathBuf) {
        let s = self
            .client
            .clone()
            .create_session(pb::CreateSessionRequest::default())
            .await
            .unwrap()
            .into_inner();
        (s.session_id, PathBuf::from(s.workspace_path))
    }

    /// Stops the server and waits for it to close every session.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }

    /// The server's private state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.workspaces.path().join("state")
    }

    /// Ids of this server's containers that exist now (docker CLI).
    pub fn containers(&self) -> Vec<String> {
        containers_labelled(&format!("sandboxd.service={}", self.service))
    }
}

/// Ids of containers with `label` (docker CLI), running or not.
pub fn containers_labelled(label: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--no-trunc",
            "--filter",
            &format!("label={label}"),
        ])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Force-removes every container with `label` (docker CLI).
pub fn remove_containers_labelled(label: &str) {
    let ids = containers_labelled(label);
    if !ids.is_empty() {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f"])
            .args(&ids)
            .output();
    }
}

impl Drop for TestServer {
    /// A test that panicked never called `stop`: remove its containers and
    /// unmount its workspaces so no test leaks one.
    fn drop(&mut self) {
        if self.stop.is_some() {
            remove_containers_labelled(&format!("sandboxd.service={}", self.service));
            unmount_under(self.workspaces.path());
        }
    }
}

/// Mount points at or under `dir`.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|m| Path::new(m).starts_with(dir))
        .map(str::to_string)
        .collect()
}

/// Detaches every mount under `dir` (workspace volumes and pins of a
/// server that did not stop cleanly).
pub fn unmount_under(dir: &Path) {
    for m in mounts_under(dir) {
        let _ = rustix::mount::unmount(m.as_str(), rustix::mount::UnmountFlags::DETACH);
    }
}

/// The ErrorInfo reason of a refusal.
pub fn reason(status: &tonic::Status) -> String {
    status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("status without ErrorInfo: {status:?}"))
        .reason
}

/// Every regular file and symlink under `root` with its bytes (symlinks as
/// their target), to prove a refusal changed nothing.
pub fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                out.insert(
                    format!("{rel}@"),
                    std::fs::read_link(&path)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                );
            } else if ft.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &path, out);
            } else if ft.is_file() {
                out.insert(rel, std::fs::read(&path).unwrap());
            } else {
                // A fifo or socket: reading it could block forever.
                out.insert(format!("{rel}|"), Vec::new());
            }
        }
    }
    walk(root, root, &mut out);
    out
}

pub fn edit(old: &str, new: &str) -> pb::Edit {
    pb::Edit {
        old_string: old.into(),
        new_string: new.into(),
        replace_all: false,
    }
}

pub fn edit_req(session: &str, path: &str, edits: Vec<pb::Edit>) -> pb::EditFileRequest {
    pb::EditFileRequest {
        session_id: session.into(),
        path: path.into(),
        edits,
        expected_sha256: String::new(),
    }
}

pub fn read_req(session: &str, path: &str) -> pb::ReadFileRequest {
    pb::ReadFileRequest {
        session_id: session.into(),
        path: path.into(),
        offset: 0,
        limit: 0,
    }
}

/// What one RunCommand call produced.
pub struct Ran {
    pub started: Option<pb::CommandStarted>,
    pub live_stdout: String,
    pub live_stderr: String,
    pub exit: pb::CommandExit,
    pub elapsed: Duration,
}

impl Ran {
    pub fn stdout(&self) -> &str {
        &self.exit.stdout.as_ref().unwrap().text
    }
    pub fn stderr(&self) -> &str {
        &self.exit.stderr.as_ref().unwrap().text
    }
}

/// Runs `command` and collects every event; panics on a refused call.
pub async fn run(client: &Client, session: &str, command: &str, timeout_ms: u64) -> Ran {
    try_run(client, run_req(session, command, timeout_ms))
        .await
        .unwrap()
}

pub fn run_req(session: &str, command: &str, timeout_ms: u64) -> pb::RunCommandRequest {
    pb::RunCommandRequest {
        session_id: session.into(),
        command: command.into(),
        timeout_ms,
        ..Default::default()
    }
}

pub async fn try_run(client: &Client, req: pb::RunCommandRequest) -> Result<Ran, tonic::Status> {
    use pb::run_command_event::Event;
    let t0 = std::time::Instant::now();
    let mut events = client.clone().run_command(req).await?.into_inner();
    let (mut started, mut live_stdout, mut live_stderr) = (None, String::new(), String::new());
    while let Some(ev) = events.message().await? {
        match ev.event.expect("event") {
            Event::Started(s) => {
                assert!(started.is_none(), "two started events");
                started = Some(s);
            }
            Event::Stdout(c) => live_stdout.push_str(&c.data),
            Event::Stderr(c) => live_stderr.push_str(&c.data),
            Event::Exit(exit) => {
                assert!(events.message().await?.is_none(), "events after exit");
                return Ok(Ran {
                    started,
                    live_stdout,
                    live_stderr,
                    exit,
                    elapsed: t0.elapsed(),
                });
            }
        }
    }
    panic!("stream ended without an exit event");
}
