//! The Docker implementation of [`Runtime`], over bollard. This is the only
//! module that talks to Docker. The client negotiates the API version with
//! the daemon on first use (the engine here speaks 1.41), so a daemon that
//! is down at startup is picked up once it answers.
//!
//! Every call has a deadline ([`DEFAULT_ENGINE_TIMEOUT`], or the one given):
//! an engine that takes a call and never answers fails it in bounded time
//! ([`Error::EngineTimeout`]); only the import of the default image, whose
//! answer comes after its whole upload, has a long one. A container the
//! engine fails to remove is kept in a list and removal retried, with
//! growing pauses, until the engine removes it: it is never forgotten.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder, TagImageOptionsBuilder,
};
use futures_util::{StreamExt, TryStreamExt};
use tokio::sync::{Mutex, OnceCell};

use super::build::{self, BuildSpec, BuildStream, ImageInfo};
use super::image;
use super::{ContainerSpec, Error, ExecSpec, ExecState, InputSink, Output, OutputStream, Runtime};

mod builds;
mod cgroup;

pub use builds::{BRIDGE as BUILD_BRIDGE, NETWORK as BUILD_NETWORK};

/// How long an engine call may take to answer by default (streams, once
/// answered, are not limited).
pub const DEFAULT_ENGINE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the import of the default image may take: its answer comes
/// only after the whole rootfs is uploaded.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(3600);

/// Longest pause between two tries at removing a container.
const RETRY_MAX_PAUSE: Duration = Duration::from_secs(15);

/// Docker via its Engine API.
#[derive(Debug)]
pub struct DockerRuntime {
    host: Option<String>,
    timeout: Duration,
    client: Arc<OnceCell<Docker>>,
    build: Mutex<()>,
    /// Containers whose removal failed, retried until they are gone.
    doomed: Arc<std::sync::Mutex<BTreeSet<String>>>,
    /// The task retrying them runs.
    retrying: Arc<std::sync::atomic::AtomicBool>,
}

impl DockerRuntime {
    /// A runtime for the daemon at `host` (`unix:///path`, `tcp://...`), or
    /// the local default (`DOCKER_HOST`, else /var/run/docker.sock), with
    /// the default deadline on every call. Connecting happens on first use.
    pub fn new(host: Option<String>) -> DockerRuntime {
        Self::with_timeout(host, DEFAULT_ENGINE_TIMEOUT)
    }

    /// [`DockerRuntime::new`] with `timeout` as every call's deadline.
    pub fn with_timeout(host: Option<String>, timeout: Duration) -> DockerRuntime {
        DockerRuntime {
            host,
            timeout: timeout.max(Duration::from_secs(1)),
            client: Arc::default(),
            build: Mutex::new(()),
            doomed: Arc::default(),
            retrying: Arc::default(),
        }
    }

    /// Every call's deadline.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn client(&self) -> Result<&Docker, Error> {
        self.client
            .get_or_try_init(|| connect(self.host.as_deref(), self.timeout))
            .await
    }

    /// Keeps trying to remove `id` until the engine does (in the
    /// background, pausing longer after each failure).
    fn doom(&self, id: &str) {
        self.doomed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string());
        if self
            .retrying
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let (doomed, retrying) = (Arc::clone(&self.doomed), Arc::clone(&self.retrying));
        let (cell, host, timeout) = (Arc::clone(&self.client), self.host.clone(), self.timeout);
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(500);
            loop {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX_PAUSE);
                let Ok(docker) = cell
                    .get_or_try_init(|| connect(host.as_deref(), timeout))
                    .await
                else {
                    continue;
                };
                let ids: Vec<String> = doomed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .cloned()
                    .collect();
                for id in ids {
                    if remove(docker, &id).await.is_ok() {
                        tracing::info!(container = %id, "a container the engine had failed to remove is removed");
                        doomed.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                    }
                }
                let left = doomed.lock().unwrap_or_else(|e| e.into_inner());
                if left.is_empty() {
                    retrying.store(false, std::sync::atomic::Ordering::Release);
                    return;
                }
                tracing::warn!(containers = ?*left, "the engine still fails to remove these containers; retrying");
            }
        });
    }

    /// Tries once more, within `wait`, to remove every container a removal
    /// failed for (at shutdown); returns those still there, which the next
    /// start over the same state directory removes.
    pub async fn finish_removals(&self, wait: Duration) -> Vec<String> {
        let ids: Vec<String> = self
            .doomed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect();
        let Some(docker) = self.client.get() else {
            return ids;
        };
        let mut left = Vec::new();
        for id in ids {
            match tokio::time::timeout(wait, remove(docker, &id)).await {
                Ok(Ok(())) => {
                    self.doomed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&id);
                }
                _ => left.push(id),
            }
        }
        left
    }

    /// Checks that the daemon answers.
    pub async fn ping(&self) -> Result<(), Error> {
        let docker = self.client().await?;
        docker
            .ping()
            .await
            .map(|_| ())
            .map_err(|e| Error::Connect(e.to_string()))
    }

    /// The engine's address as configured (`None`: `DOCKER_HOST` or the
    /// local socket).
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }

    /// Names of the container runtimes the engine knows (`runc`, `runsc`...).
    pub async fn runtimes(&self) -> Result<Vec<String>, Error> {
        let info = self
            .client()
            .await?
            .info()
            .await
            .map_err(|e| Error::Connect(e.to_string()))?;
        Ok(info.runtimes.unwrap_or_default().into_keys().collect())
    }

    /// One plain Engine API exec run to its end (create, start attached,
    /// drain, inspect): the baseline the benchmark compares against.
    /// Returns the exit code and the bytes of output drained.
    pub async fn raw_exec(&self, container: &str, argv: &[&str]) -> Result<(i64, u64), Error> {
        let spec = ExecSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: Default::default(),
            cwd: "/".into(),
            user: String::new(),
        };
        let (id, mut output) = self.start_exec(container, &spec).await?;
        let mut bytes = 0u64;
        while let Some(chunk) = output.next().await {
            match chunk? {
                Output::Stdout(b) | Output::Stderr(b) => bytes += b.len() as u64,
            }
        }
        loop {
            if let ExecState::Exited(code) = self.exec_state(&id).await? {
                return Ok((code.unwrap_or(-1), bytes));
            }
        }
    }

    /// Builds the default image from its recipe unless it already exists.
    pub async fn build_default_image(&self) -> Result<bool, Error> {
        let docker = self.client().await?;
        let reference = image::default_image();
        // One build at a time in this process, and across processes (tests
        // run in parallel binaries) through a lock file.
        let _guard = self.build.lock().await;
        let lock = tokio::task::spawn_blocking(lock_file)
            .await
            .map_err(|e| build_error(e.to_string()))?
            .map_err(|e| build_error(format!("cannot take the build lock: {e}")))?;
        if docker.inspect_image(&reference).await.is_ok() {
            self.tag_alias(&reference).await?;
            drop(lock);
            return Ok(false);
        }
        let dir = tempfile::Builder::new()
            .prefix("sandboxd-rootfs-")
            .tempdir()
            .map_err(|e| build_error(format!("cannot make a build directory: {e}")))?;
        image::build_rootfs(dir.path()).await?;
        let mut tar = tokio::process::Command::new("tar")
            .arg("-C")
            .arg(dir.path())
            .args(["--numeric-owner", "-c", "."])
            .stdout(std::process::Stdio::piped())
            .stdin(std::process::Stdio::null())
            .spawn()
            .map_err(|e| build_error(format!("cannot run tar: {e}")))?;
        let stdout = tar
            .stdout
            .take()
            .ok_or_else(|| build_error("tar has no stdout".into()))?;
        let body = bollard::body_try_stream(tokio_util::io::ReaderStream::new(stdout));
        let options = CreateImageOptionsBuilder::new()
            .from_src("-")
            .repo(image::REPOSITORY)
            .tag(&image::default_tag())
            .build();
        docker
            .clone()
            .with_timeout(IMPORT_TIMEOUT)
            .create_image(Some(options), Some(body), None)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| build_error(format!("docker import failed: {e}")))?;
        let status = tar.wait().await.map_err(|e| build_error(e.to_string()))?;
        if !status.success() {
            return Err(build_error(format!("tar failed: {status}")));
        }
        let dir_path = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || dir.close())
            .await
            .map_err(|e| build_error(e.to_string()))?
            .map_err(|e| build_error(format!("cannot remove {}: {e}", dir_path.display())))?;
        self.tag_alias(&reference).await?;
        drop(lock);
        tracing::info!(image = %reference, alias = %image::alias(), "default sandbox image built");
        Ok(true)
    }

    /// Points `sandboxd-default:latest` at `reference` (the current build).
    async fn tag_alias(&self, reference: &str) -> Result<(), Error> {
        let options = TagImageOptionsBuilder::new()
            .repo(image::REPOSITORY)
            .tag("latest")
            .build();
        self.client()
            .await?
            .tag_image(reference, Some(options))
            .await
            .map_err(|e| build_error(format!("cannot tag it {}: {e}", image::alias())))
    }
}

impl DockerRuntime {
    /// Every container, running or not, matching one engine filter.
    async fn containers(
        &self,
        filter: &str,
        value: String,
    ) -> Result<Vec<bollard::models::ContainerSummary>, Error> {
        let filters = HashMap::from([(filter, vec![value])]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        self.client()
            .await?
            .list_containers(Some(options))
            .await
            .map_err(|e| classify(Error::ListContainers, e))
    }

    /// Creates and starts an attached exec; stdin is attached only if asked
    /// (otherwise the process reads /dev/null).
    async fn exec(
        &self,
        container: &str,
        spec: &ExecSpec,
        stdin: bool,
    ) -> Result<(String, OutputStream, InputSink), Error> {
        let docker = self.client().await?;
        let options = CreateExecOptions {
            attach_stdin: Some(stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            cmd: Some(spec.argv.clone()),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: Some(spec.cwd.clone()),
            user: (!spec.user.is_empty()).then(|| spec.user.clone()),
            ..Default::default()
        };
        let exec = docker
            .create_exec(container, options)
            .await
            .map_err(|e| classify(Error::StartExec, e))?;
        let started = docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map_err(|e| classify(Error::StartExec, e))?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(Error::StartExec("the exec started detached".into()));
        };
        let stream = output.filter_map(|item| async move {
            match item {
                Ok(bollard::container::LogOutput::StdOut { message }) => {
                    Some(Ok(Output::Stdout(message)))
                }
                Ok(bollard::container::LogOutput::StdErr { message }) => {
                    Some(Ok(Output::Stderr(message)))
                }
                Ok(_) => None,
                Err(e) => Some(Err(classify(Error::StartExec, e))),
            }
        });
        Ok((exec.id, Box::pin(stream), input))
    }
}

fn build_error(why: String) -> Error {
    Error::BuildImage {
        image: image::default_image(),
        why,
    }
}

/// An exclusive lock shared by every sandboxd process of this user: a file
/// in sandboxd's private state root (never in a shared directory such as
/// /tmp, where another user could plant a link in its place).
fn lock_file() -> std::io::Result<std::os::fd::OwnedFd> {
    let root = crate::state::StateDir::open(&crate::state::StateDir::default_root())
        .map_err(std::io::Error::other)?;
    root.lock("image-build.lock")
}

/// Maps a Docker error: transport failures mean the daemon is unreachable;
/// API errors belong to the operation.
fn classify(op: fn(String) -> Error, e: DockerError) -> Error {
    match e {
        DockerError::DockerResponseServerError {
            status_code,
            message,
        } => op(format!("{message} (HTTP {status_code})")),
        DockerError::RequestTimeoutError => Error::EngineTimeout,
        other => Error::Connect(other.to_string()),
    }
}

/// A client of the engine at `host` (see [`DockerRuntime::new`]) with
/// `timeout` on every call, its API version agreed with the engine.
async fn connect(host: Option<&str>, timeout: Duration) -> Result<Docker, Error> {
    let secs = timeout.as_secs();
    let docker = match host {
        Some(h) if h.starts_with("unix://") => {
            Docker::connect_with_unix(h, secs, bollard::API_DEFAULT_VERSION)
        }
        Some(h) => Docker::connect_with_http(h, secs, bollard::API_DEFAULT_VERSION),
        None => Docker::connect_with_local_defaults().map(|d| d.with_timeout(timeout)),
    }
    .map_err(|e| Error::Connect(e.to_string()))?;
    docker
        .negotiate_version()
        .await
        .map_err(|e| classify(Error::Connect, e))
}

/// Removes container `id` (force, with its anonymous volumes); a missing
/// one, or one being removed already, is done.
async fn remove(docker: &Docker, id: &str) -> Result<(), Error> {
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_status(&e, &[404, 409]) => Ok(()),
        Err(e) => Err(classify(Error::RemoveContainer, e)),
    }
}

fn is_status(e: &DockerError, codes: &[u16]) -> bool {
    matches!(e, DockerError::DockerResponseServerError { status_code, .. } if codes.contains(status_code))
}

#[tonic::async_trait]
impl Runtime for DockerRuntime {
    async fn ensure_image(&self, reference: &str) -> Result<(), Error> {
        let docker = self.client().await?;
        match docker.inspect_image(reference).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, &[404]) => {
                if reference == image::default_image() {
                    self.build_default_image().await.map(|_| ())
                } else {
                    Err(Error::ImageMissing {
                        image: reference.to_string(),
                        why: "it is not in the local image store and images are never pulled"
                            .into(),
                    })
                }
            }
            Err(e) => Err(classify(Error::StartContainer, e)),
        }
    }

    async fn start_container(&self, spec: &ContainerSpec) -> Result<String, Error> {
        let docker = self.client().await?;
        // Paths the image declares as volumes would get anonymous volumes,
        // writable places outside the workspace's quota: each gets a tmpfs
        // of /tmp's size instead.
        let declared: Vec<String> = docker
            .inspect_image(&spec.image)
            .await
            .map_err(|e| classify(Error::StartContainer, e))?
            .config
            .and_then(|c| c.volumes)
            .unwrap_or_default();
        let mut tmpfs = HashMap::from([(
            "/tmp".to_string(),
            format!("rw,nosuid,nodev,size={}", spec.tmp_bytes),
        )]);
        for path in declared {
            // Compared, and covered, as the engine will mount it.
            let clean = build::clean_volume_path(&path);
            let over = |ours: &str| clean == ours || clean.starts_with(&format!("{ours}/"));
            if clean == "/" || over("/workspace") || over("/.sandboxd") {
                return Err(Error::ImageUnusable {
                    image: spec.image.clone(),
                    why: format!(
                        "it declares VOLUME {path}, which would hide the workspace or the \
                         supervisor; remove that VOLUME from its recipe"
                    ),
                });
            }
            tmpfs
                .entry(clean)
                .or_insert_with(|| format!("rw,nosuid,nodev,size={}", spec.tmp_bytes));
        }
        let memory = i64::try_from(spec.limits.memory_bytes).unwrap_or(i64::MAX);
        // Mounts, never the legacy binds: for a bind whose source is
        // missing, the engine (as root) would make it, and chown it, through
        // whatever symlinks the path holds by then; a mount refuses it.
        let bind = |source: &std::path::Path, target: &str, read_only: bool| Mount {
            typ: Some(MountType::BIND),
            source: Some(source.display().to_string()),
            target: Some(target.to_string()),
            read_only: Some(read_only),
            ..Default::default()
        };
        let mut workspace = bind(&spec.workspace, super::supervisor::WORKSPACE_PATH, false);
        if spec.workspace_slot {
            workspace.bind_options = Some(bollard::models::MountBindOptions {
                propagation: Some(bollard::models::MountBindOptionsPropagationEnum::RSLAVE),
                ..Default::default()
            });
        }
        let mut mounts = vec![workspace];
        if let Some(binary) = &spec.supervisor {
            mounts.push(bind(binary, super::supervisor::MOUNT_PATH, true));
            if let Some(idle) = &spec.idle {
                mounts.push(bind(idle, super::supervisor::idle::MOUNT_PATH, true));
            }
        }
        if let Some(dir) = &spec.socket_dir {
            mounts.push(bind(dir, super::supervisor::RUN_PATH, true));
        }
        let host_config = HostConfig {
            mounts: Some(mounts),
            network_mode: Some("none".into()),
            cap_drop: Some(vec!["ALL".into()]),
            // Only the supervisor (root in the container) holds these;
            // commands run as another user with none.
            cap_add: spec.supervisor.as_ref().map(|_| {
                super::supervisor::SUPERVISOR_CAPS
                    .iter()
                    .map(|c| c.to_string())
                    .collect()
            }),
            security_opt: Some(vec!["no-new-privileges".into()]),
            readonly_rootfs: Some(true),
            tmpfs: Some(tmpfs),
            memory: Some(memory),
            // No swap beyond the memory limit.
            memory_swap: Some(memory),
            nano_cpus: Some(i64::try_from(spec.limits.nano_cpus).unwrap_or(i64::MAX)),
            pids_limit: Some(i64::try_from(spec.limits.pids).unwrap_or(i64::MAX)),
            init: Some(true),
            runtime: spec.runtime.clone(),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            // The container's own process is ours, whatever the image's
            // ENTRYPOINT and CMD say (an explicit entrypoint drops the
            // image's CMD). With the supervisor mounted, the image needs
            // nothing but `sh`.
            entrypoint: Some(match (&spec.supervisor, &spec.idle) {
                (Some(_), Some(_)) => vec![super::supervisor::idle::MOUNT_PATH.into()],
                (Some(_), None) => vec![super::supervisor::MOUNT_PATH.into(), "idle".into()],
                (None, _) => vec!["sleep".into(), "infinity".into()],
            }),
            cmd: Some(Vec::new()),
            // An image's HEALTHCHECK would run a command of its own in the
            // sandbox, unasked, every few seconds.
            healthcheck: Some(bollard::models::HealthConfig {
                test: Some(vec!["NONE".into()]),
                ..Default::default()
            }),
            // With a supervisor, the container's own processes (init and
            // the idle keeper) run as root so that the supervisor exec may
            // hold the capabilities it needs; Docker gives an exec of any
            // other user none. Root here has no DAC override, so it starts
            // in `/`, not in a workspace it may not be able to enter.
            user: Some(match spec.supervisor {
                Some(_) => super::supervisor::SUPERVISOR_USER.to_string(),
                None => spec.user.clone(),
            }),
            working_dir: Some(match spec.supervisor {
                Some(_) => "/".to_string(),
                None => "/workspace".to_string(),
            }),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(spec.labels.clone().into_iter().collect()),
            network_disabled: Some(true),
            host_config: Some(host_config),
            ..Default::default()
        };
        let name = format!(
            "sandboxd-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = match docker.create_container(Some(options), body).await {
            Ok(created) => created,
            Err(e) => {
                // No answer (a deadline passed, the connection broke) is no
                // proof that nothing was made: the container, known by its
                // unique name, is removed once the engine answers.
                if !matches!(e, DockerError::DockerResponseServerError { .. }) {
                    self.doom(&name);
                }
                return Err(classify(Error::StartContainer, e));
            }
        };
        crate::profile::mark("engine: container created");
        if let Err(e) = docker.start_container(&created.id, None).await {
            let _ = self.remove_container(&created.id).await;
            return Err(classify(Error::StartContainer, e));
        }
        crate::profile::mark("engine: container started");
        Ok(created.id)
    }

    async fn kill_container(&self, id: &str) -> Result<(), Error> {
        let docker = self.client().await?;
        let options = KillContainerOptionsBuilder::new().signal("KILL").build();
        match docker.kill_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            // Already gone or not running: the goal is met.
            Err(e) if is_status(&e, &[404, 409]) => Ok(()),
            Err(e) => Err(classify(Error::KillContainer, e)),
        }
    }

    async fn remove_container(&self, id: &str) -> Result<(), Error> {
        let removed = match self.client().await {
            Ok(docker) => remove(docker, id).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &removed {
            tracing::warn!(container = %id, error = %e, "the engine failed to remove a container; retrying until it does");
            self.doom(id);
        }
        removed
    }

    fn pending_removals(&self) -> Vec<String> {
        self.doomed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    async fn remove_all_labelled(&self, label: &str, value: &str) -> Result<usize, Error> {
        let containers = self.containers("label", format!("{label}={value}")).await?;
        let mut removed = 0;
        for c in containers {
            if let Some(id) = c.id {
                self.remove_container(&id).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    async fn start_exec(
        &self,
        container: &str,
        spec: &ExecSpec,
    ) -> Result<(String, OutputStream), Error> {
        let (id, output, _) = self.exec(container, spec, false).await?;
        Ok((id, output))
    }

    async fn start_exec_with_stdin(
        &self,
        container: &str,
        spec: &ExecSpec,
    ) -> Result<(String, OutputStream, InputSink), Error> {
        self.exec(container, spec, true).await
    }

    async fn exec_state(&self, exec: &str) -> Result<ExecState, Error> {
        let docker = self.client().await?;
        let info = docker
            .inspect_exec(exec)
            .await
            .map_err(|e| classify(Error::InspectExec, e))?;
        Ok(if info.running.unwrap_or(false) {
            ExecState::Running
        } else {
            ExecState::Exited(info.exit_code)
        })
    }

    async fn exec_pid(&self, exec: &str) -> Option<i64> {
        let docker = self.client().await.ok()?;
        docker.inspect_exec(exec).await.ok()?.pid.filter(|&p| p > 0)
    }

    async fn oom_kills(&self, container: &str) -> Option<u64> {
        cgroup::oom_kills(container)
    }

    async fn pids_refusals(&self, container: &str) -> Option<u64> {
        cgroup::pids_refusals(container)
    }

    async fn kill_now(&self, container: &str) -> bool {
        let id = container.to_string();
        tokio::task::spawn_blocking(move || cgroup::kill_all(&id))
            .await
            .unwrap_or(false)
    }

    async fn died_of_oom(&self, container: &str) -> bool {
        let Ok(docker) = self.client().await else {
            return false;
        };
        docker
            .inspect_container(container, None)
            .await
            .ok()
            .and_then(|info| info.state)
            .and_then(|state| state.oom_killed)
            .unwrap_or(false)
    }

    async fn image_info(&self, reference: &str) -> Result<Option<ImageInfo>, Error> {
        let docker = self.client().await?;
        match docker.inspect_image(reference).await {
            Ok(i) => Ok(Some(ImageInfo {
                id: i.id.unwrap_or_default(),
                tags: i.repo_tags.unwrap_or_default(),
                onbuild: i
                    .config
                    .as_ref()
                    .and_then(|c| c.on_build.clone())
                    .unwrap_or_default(),
                labels: i
                    .config
                    .and_then(|c| c.labels)
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                created: i.created.as_deref().map_or(0, unix_seconds),
                size: u64::try_from(i.size.unwrap_or(0)).unwrap_or(0),
            })),
            Err(e) if is_status(&e, &[404]) => Ok(None),
            Err(e) => Err(classify(Error::Images, e)),
        }
    }

    async fn list_images(&self, label: Option<&str>) -> Result<Vec<ImageInfo>, Error> {
        let docker = self.client().await?;
        let filters: HashMap<&str, Vec<&str>> = label
            .map(|l| HashMap::from([("label", vec![l])]))
            .unwrap_or_default();
        let options = ListImagesOptionsBuilder::new().filters(&filters).build();
        let images = docker
            .list_images(Some(options))
            .await
            .map_err(|e| classify(Error::Images, e))?;
        Ok(images
            .into_iter()
            .map(|i| ImageInfo {
                id: i.id,
                tags: i
                    .repo_tags
                    .into_iter()
                    .filter(|t| t != "<none>:<none>")
                    .collect(),
                labels: i.labels.into_iter().collect(),
                created: u64::try_from(i.created).unwrap_or(0),
                size: u64::try_from(i.size).unwrap_or(0),
                onbuild: Vec::new(),
            })
            .collect())
    }

    async fn build_image(&self, spec: BuildSpec) -> Result<BuildStream, Error> {
        let docker = self.client().await?.clone();
        builds::start(docker, self.host.as_deref(), spec).await
    }

    async fn tag_image(&self, image: &str, reference: &str) -> Result<(), Error> {
        let (repo, tag) = split_reference(reference);
        let options = TagImageOptionsBuilder::new().repo(repo).tag(tag).build();
        self.client()
            .await?
            .tag_image(image, Some(options))
            .await
            .map_err(|e| classify(Error::Images, e))
    }

    async fn containers_of_image(&self, image: &str) -> Result<Vec<String>, Error> {
        let containers = self.containers("ancestor", image.to_string()).await?;
        Ok(containers.into_iter().filter_map(|c| c.id).collect())
    }

    async fn remove_image(&self, reference: &str) -> Result<(), Error> {
        let options = RemoveImageOptionsBuilder::new()
            .force(false)
            .noprune(false)
            .build();
        match self
            .client()
            .await?
            .remove_image(reference, Some(options), None)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, &[404]) => Ok(()),
            Err(DockerError::DockerResponseServerError {
                status_code: 409,
                message,
            }) => Err(Error::ImageInUse {
                image: reference.to_string(),
                why: message,
            }),
            Err(e) => Err(classify(Error::Images, e)),
        }
    }

    async fn remove_labelled(
        &self,
        label: &str,
        value: &str,
        keep_label: &str,
        keep_value: &str,
    ) -> Result<usize, Error> {
        let containers = self.containers("label", format!("{label}={value}")).await?;
        let mut removed = 0;
        for c in containers {
            let keep = c
                .labels
                .as_ref()
                .and_then(|l| l.get(keep_label))
                .is_some_and(|v| v == keep_value);
            if keep {
                continue;
            }
            if let Some(id) = c.id {
                self.remove_container(&id).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// `repo:tag` (a `:` after the last `/`), or `repo` with tag `latest`.
fn split_reference(reference: &str) -> (&str, &str) {
    match reference.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (reference, "latest"),
    }
}

/// Seconds since the Unix epoch of an RFC 3339 time as the engine writes
/// it (`2026-12-01T03:10:00.123456789Z`); 0 when it does not parse.
fn unix_seconds(text: &str) -> u64 {
    let parse = || -> Option<u64> {
        let (date, time) = text.split_once('T')?;
        let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
        let (y, m, day) = (d.next()??, d.next()??, d.next()??);
        let mut t = time.get(..8)?.splitn(3, ':').map(|p| p.parse::<i64>().ok());
        let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
        // Days from the civil date (Howard Hinnant's algorithm).
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
    };
    parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_times_and_references_parse() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), 0);
        assert_eq!(
            unix_seconds("2026-12-01T03:10:00.123456789Z"),
            1_796_094_600
        );
        assert_eq!(unix_seconds("2000-02-29T12:00:01+00:00"), 951_825_601);
        assert_eq!(unix_seconds("garbage"), 0);
        assert_eq!(split_reference("a/b:c"), ("a/b", "c"));
        assert_eq!(split_reference("host:5000/b"), ("host:5000/b", "latest"));
        assert_eq!(split_reference("b"), ("b", "latest"));
    }
}
