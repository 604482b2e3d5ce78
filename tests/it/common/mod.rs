//! What the integration tests share: a [`TestServer`] (the library's
//! embedded service, [`sandboxd::local`], set up for a test and cleaned up
//! even when the test fails), the host's Docker state as the docker CLI sees
//! it, RunCommand collected into one result ([`run`]), and the file-tool
//! requests and refusal checks ([`files`]).
//!
//! The `it` binary declares this module privately, so anything here that no
//! test uses is reported; the binaries that must run alone include it as a
//! public module, since each uses only part of it.

mod files;
mod run;
mod serve;

use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Once};

use sandboxd::local::{self, Local};
use sandboxd::pb;
use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::session::Config;
use tempfile::TempDir;

pub use files::{
    assert_refused, assert_refused_unchanged, edit, edit_req, read_req, reason, refusals, snapshot,
};
pub use local::Client;

/// The uid and gid commands run as in fresh workspaces and root's
/// checkouts.
pub const UID: u32 = sandboxd::session::defaults::COMMAND_USER.0;
/// See [`UID`].
pub const GID: u32 = sandboxd::session::defaults::COMMAND_USER.1;
pub use run::{run, run_req, try_run};
pub use serve::{listening_in, spawn_listening, spawn_logging};

/// The `sandboxd` binary: the supervisor mounted into containers, and the
/// CLI the tests drive.
pub const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

/// A Docker host where no daemon listens: file-tool tests run without
/// containers (and show that file tools work when the engine is down).
pub const NO_DOCKER: &str = "unix:///nonexistent/sandboxd-test-docker.sock";

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

/// Ensures the host prerequisites of the tests, installing what a fresh
/// machine lacks as the service itself would (see `sandboxd::provision`):
/// a static busybox for the image without libc, `su` to act as another
/// local user, `git` and `tar` to check patches and archives with the
/// tools people use. (debootstrap comes with the first image build, runsc with
/// the first gVisor server.) Runs once per process.
pub fn prepare_host() {
    use sandboxd::provision::{Need, ensure};
    static PREPARED: Once = Once::new();
    PREPARED.call_once(|| {
        let needs = [
            Need {
                program: "busybox",
                package: "busybox-static",
            },
            Need {
                program: "su",
                package: "util-linux",
            },
            // Patches are checked with `git apply`, archives with `tar`.
            Need {
                program: "git",
                package: "git",
            },
            Need {
                program: "tar",
                package: "tar",
            },
        ];
        if let Err(e) = ensure(&needs) {
            panic!("the tests cannot prepare this host: {e}");
        }
    });
}

/// A running in-process server with one allowed root for lent directories.
/// It derefs to the [`Local`] service: `client`, `addr`, `registry`,
/// `service`, `state_dir()`.
pub struct TestServer {
    /// `None` once stopped.
    local: Option<Local>,
    /// Operators allow existing directories under this root.
    pub allowed_root: TempDir,
}

impl TestServer {
    /// A server for file-tool tests: its container engine is unreachable.
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    /// [`TestServer::start`] with its configuration changed by `tweak`.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
        Self::build(without_docker(), tweak).await
    }

    /// A file-tools server that demands `authorization: Bearer <token>`.
    pub async fn with_token(token: &str) -> TestServer {
        let access = sandboxd::server::Access {
            token: Some(token.to_string()),
            ..Default::default()
        };
        Self::with_access(access, |_| {}).await
    }

    /// A file-tools server reached with `access`, its configuration
    /// changed by `tweak`.
    pub async fn with_access(
        access: sandboxd::server::Access,
        tweak: impl FnOnce(&mut Config),
    ) -> TestServer {
        Self::build(without_docker().access(access), tweak).await
    }

    /// A server over the real Docker daemon (with the default image built),
    /// running commands through the in-container supervisor.
    pub async fn with_docker() -> TestServer {
        Self::with_docker_mode_and(Mode::Supervisor, |_| {}).await
    }

    /// A server over the real Docker daemon running commands in `mode`.
    pub async fn with_docker_mode(mode: Mode) -> TestServer {
        Self::with_docker_mode_and(mode, |_| {}).await
    }

    /// [`TestServer::with_docker_mode`] with its configuration changed by
    /// `tweak`.
    pub async fn with_docker_mode_and(mode: Mode, tweak: impl FnOnce(&mut Config)) -> TestServer {
        Self::build(Self::docker_builder(mode).await, tweak).await
    }

    /// A supervisor server over the real Docker daemon, reached with
    /// `access`, its configuration changed by `tweak`.
    pub async fn with_docker_access(
        access: sandboxd::server::Access,
        tweak: impl FnOnce(&mut Config),
    ) -> TestServer {
        let builder = Self::docker_builder(Mode::Supervisor).await.access(access);
        Self::build(builder, tweak).await
    }

    /// A server in `mode` over `docker` (an engine reached another way,
    /// e.g. through a proxy), its configuration changed by `tweak`. The
    /// default image is built first through the real engine.
    pub async fn over_engine(
        docker: Arc<DockerRuntime>,
        mode: Mode,
        tweak: impl FnOnce(&mut Config),
    ) -> TestServer {
        let builder = Self::docker_builder(mode).await.docker(docker);
        Self::build(builder, tweak).await
    }

    async fn docker_builder(mode: Mode) -> local::Builder {
        prepare_host();
        let docker = Arc::new(DockerRuntime::new(None));
        if let Err(e) = docker.ping().await {
            panic!("these tests need a running Docker daemon (docker info must answer): {e}");
        }
        if mode == Mode::Gvisor
            && let Err(e) = sandboxd::sandbox::runsc::ensure_registered(&docker).await
        {
            panic!("the gVisor tests need runsc as a runtime of the Docker engine: {e}");
        }
        let builder = new_local().docker(docker);
        match mode {
            Mode::Supervisor => builder.supervisor(SANDBOXD),
            Mode::SupervisorStdio => builder.supervisor(SANDBOXD).socket_link(false),
            Mode::Exec => builder,
            Mode::Gvisor => builder
                .supervisor(SANDBOXD)
                .configure(|config| config.sandbox.runtime = Some("runsc".into())),
        }
    }

    async fn build(builder: local::Builder, tweak: impl FnOnce(&mut Config)) -> TestServer {
        prepare_host();
        let allowed_root = tempfile::tempdir().unwrap();
        // Lent directories must be private to their owner (tempfile makes
        // directories 0755).
        std::fs::set_permissions(
            allowed_root.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let allowed = allowed_root.path().to_path_buf();
        let local = builder
            .configure(|config| config.allowed_roots = vec![allowed])
            .configure(tweak)
            .reap_interval(std::time::Duration::from_millis(100))
            .start()
            .await
            .unwrap_or_else(|e| match e {
                local::Error::BuildImage(e) => {
                    panic!("cannot build the default sandbox image: {e}")
                }
                e => panic!("cannot start the test server: {e}"),
            });
        TestServer {
            local: Some(local),
            allowed_root,
        }
    }

    /// Opens a session over a fresh workspace; returns (id, host path).
    pub async fn session(&self) -> (String, std::path::PathBuf) {
        let s = self
            .client
            .clone()
            .create_session(pb::CreateSessionRequest::default())
            .await
            .unwrap()
            .into_inner();
        (s.session_id, s.workspace_path.into())
    }

    /// Opens a session over the existing directory `dir`.
    pub async fn lend(&self, dir: &Path) -> pb::Session {
        self.try_lend(dir).await.unwrap()
    }

    /// CreateSession over the existing directory `dir`, as answered.
    pub async fn try_lend(&self, dir: &Path) -> Result<pb::Session, tonic::Status> {
        self.client
            .clone()
            .create_session(pb::CreateSessionRequest {
                workspace_path: dir.display().to_string(),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner())
    }

    /// Opens a session over a fresh workspace with `policy`; returns (id,
    /// host path).
    pub async fn session_with(&self, policy: pb::Policy) -> (String, std::path::PathBuf) {
        let s = self
            .client
            .clone()
            .create_session(pb::CreateSessionRequest {
                policy: Some(policy),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        (s.session_id, s.workspace_path.into())
    }

    /// Stops the server and waits for it to close every session.
    pub async fn stop(mut self) {
        if let Some(local) = self.local.take() {
            local.stop().await.unwrap();
        }
    }

    /// Ids of this server's containers that exist now (docker CLI).
    pub fn containers(&self) -> Vec<String> {
        containers_labelled(&format!("sandboxd.service={}", self.service))
    }

    /// Whether this server's containers are all gone within 20 s: a
    /// closed session's container is removed right after CloseSession
    /// answers.
    pub async fn containers_gone_soon(&self) -> bool {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !self.containers().is_empty() {
            if std::time::Instant::now() > until {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        true
    }
}

/// A test server's service, its name unique to the test.
fn new_local() -> local::Builder {
    let service = format!(
        "sandboxd-test-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    Local::builder(&service).unwrap()
}

/// A test server's service over an engine that does not answer.
fn without_docker() -> local::Builder {
    new_local()
        .docker(Arc::new(DockerRuntime::new(Some(NO_DOCKER.into()))))
        .build_image(false)
}

impl Deref for TestServer {
    type Target = Local;

    fn deref(&self) -> &Local {
        self.local.as_ref().expect("the test server was stopped")
    }
}

impl Drop for TestServer {
    /// A test that panicked never called `stop`: remove its containers and
    /// unmount its workspaces so no test leaks one.
    fn drop(&mut self) {
        if let Some(local) = &self.local {
            remove_containers_labelled(&format!("sandboxd.service={}", local.service));
            unmount_under(local.dir());
        }
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

/// The state of container `id` (`created`, `running`, `exited`...), empty
/// when there is none (docker CLI).
pub fn container_state(id: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.State.Status}}", id])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
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

/// Runs git in `dir` (as a throwaway identity); panics on failure, with
/// git's own words. Returns its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Whether `path` is gone within 20 s: a closed session's workspace is
/// removed right after CloseSession answers.
pub async fn gone_soon(path: &Path) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while path.exists() {
        if std::time::Instant::now() > until {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    true
}
