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
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    ListImagesOptionsBuilder, RemoveImageOptionsBuilder, TagImageOptionsBuilder,
};
use futures_util::StreamExt;
use tokio::sync::{Mutex, OnceCell};

use super::build::{BuildSpec, BuildStream, ImageInfo};
use super::image;
use super::{ContainerSpec, Error, ExecSpec, ExecState, InputSink, Output, OutputStream, Runtime};

mod builds;
mod cgroup;
mod create;
mod default_image;
mod image_paths;
mod removals;
mod runtimes;

use removals::remove;

pub use runtimes::EngineRuntime;

pub use builds::{BRIDGE as BUILD_BRIDGE, NETWORK as BUILD_NETWORK};

/// How long an engine call may take to answer by default (streams, once
/// answered, are not limited).
pub const DEFAULT_ENGINE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the import of the default image may take: its answer comes
/// only after the whole rootfs is uploaded.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(3600);

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
    /// Whether the engine has gVisor's linked entry
    /// ([`crate::sandbox::runsc::LINKED`]): asked once, or told by
    /// [`crate::sandbox::runsc::ensure_registered`].
    linked_runsc: std::sync::Mutex<Option<bool>>,
    /// The counter files of containers commands ran in, kept open.
    counters: cgroup::Counters,
    /// Ids of images whose mount targets were checked (see `image_paths`).
    paths_checked: std::sync::Mutex<std::collections::HashSet<String>>,
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
            linked_runsc: std::sync::Mutex::default(),
            counters: cgroup::Counters::default(),
            paths_checked: std::sync::Mutex::default(),
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
        let inspected = docker
            .inspect_image(&spec.image)
            .await
            .map_err(|e| classify(Error::StartContainer, e))?;
        let declared: Vec<String> = inspected.config.and_then(|c| c.volumes).unwrap_or_default();
        // Before anything is mounted: an image's symlink at a mount target
        // would move the mount (and the engine's mkdirs) elsewhere.
        let image_id = inspected.id.unwrap_or_else(|| spec.image.clone());
        self.check_image_paths(docker, &spec.image, &image_id, &declared, &spec.labels)
            .await?;
        let runtime = self.runtime_for(spec).await;
        let mut body = create::body(spec, declared, runtime)?;
        // The very image checked, whatever its name points at by now.
        body.image = Some(image_id);
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
        self.counters.forget(id);
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
        self.counters.oom_kills(container)
    }

    async fn pids_refusals(&self, container: &str) -> Option<u64> {
        self.counters.pids_refusals(container)
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

    async fn check_image(
        &self,
        reference: &str,
        owner: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), Error> {
        self.image_usable(reference, owner).await
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
