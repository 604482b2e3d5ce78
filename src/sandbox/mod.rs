//! Commands in throwaway containers.
//!
//! [`Runtime`] is the seam to the container engine; [`docker`] implements
//! it with bollard and is the only module that talks to Docker. Everything
//! else here is engine-independent:
//! - [`command`]: what a command is and how it ended, whichever path ran it;
//! - [`capture`]: output capping, applied while bytes arrive;
//! - [`supervisor`]: the usual path, one supervisor process in each
//!   container that spawns every command and runs its kill ladder
//!   ([`supervisor::inside`]), driven from the service over a link
//!   ([`supervisor::host`]);
//! - [`exec_fallback`]: the path when a container has no supervisor, each
//!   command as its own exec with the ladder run from the host;
//! - [`image`]: the default image;
//! - [`build`]: images built from a recipe, and what the engine's image
//!   store holds;
//! - [`Sandbox`], here: the owner of one session's container, which picks
//!   the path for each command.

pub mod build;
pub mod capture;
pub mod command;
pub mod docker;
pub mod exec_fallback;
pub mod image;
pub mod metered;
pub mod runsc;
pub mod supervisor;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;

pub use build::{BuildMessage, BuildSpec, BuildStream, ImageInfo};
pub use capture::Captured;
pub use command::{CommandSpec, Event, ExitReport, KilledBy, LimitHints};
use supervisor::host::{Link, Supervised};

/// Why a sandbox operation failed. Variants name the operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The engine could not be reached or refused the connection.
    #[error("the container engine is unreachable: {0}")]
    Connect(String),
    /// The engine took the call and did not answer within its deadline.
    #[error(
        "the container engine took the call and did not answer within its deadline (serve --engine-timeout)"
    )]
    EngineTimeout,
    /// The image is not present and cannot be pulled here.
    #[error("image {image} is not present: {why}")]
    ImageMissing {
        /// Image reference.
        image: String,
        /// What was tried.
        why: String,
    },
    /// The image asks for something no session may have (e.g. a volume
    /// over the workspace).
    #[error("image {image} cannot be used: {why}")]
    ImageUnusable {
        /// Image reference.
        image: String,
        /// What it asks for.
        why: String,
    },
    /// Building the default image failed.
    #[error("building image {image} failed: {why}")]
    BuildImage {
        /// Image reference.
        image: String,
        /// What went wrong.
        why: String,
    },
    /// An image a container still uses cannot be removed.
    #[error("image {image} is in use: {why}")]
    ImageInUse {
        /// Image reference.
        image: String,
        /// The engine's words.
        why: String,
    },
    /// Listing, inspecting, tagging or removing images failed.
    #[error("the image store failed: {0}")]
    Images(String),
    /// Creating or starting a container failed.
    #[error("starting a container failed: {0}")]
    StartContainer(String),
    /// Creating or starting an exec failed.
    #[error("starting the command failed: {0}")]
    StartExec(String),
    /// Inspecting an exec failed.
    #[error("inspecting the command failed: {0}")]
    InspectExec(String),
    /// Killing a container failed.
    #[error("killing the container failed: {0}")]
    KillContainer(String),
    /// Removing a container failed.
    #[error("removing the container failed: {0}")]
    RemoveContainer(String),
    /// Listing containers failed.
    #[error("listing containers failed: {0}")]
    ListContainers(String),
    /// The container's supervisor link died after commands ran there: the
    /// container can no longer be trusted and must be replaced.
    #[error("the supervisor link of the container was lost")]
    LinkLost,
    /// The workspace's mount no longer holds the session's directory (or
    /// the directory was removed): no container is started over it.
    #[error("the workspace is gone: {0}")]
    WorkspaceGone(String),
}

/// One chunk of command output.
#[derive(Debug, Clone)]
pub enum Output {
    /// Bytes written to stdout.
    Stdout(Bytes),
    /// Bytes written to stderr.
    Stderr(Bytes),
}

/// Output of an exec, ending when every writer has closed its end.
pub type OutputStream = Pin<Box<dyn Stream<Item = Result<Output, Error>> + Send>>;

/// The stdin of an exec.
pub type InputSink = Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// State of an exec's main process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecState {
    /// Still running.
    Running,
    /// Exited with this code (128+n when killed by signal n), if known.
    Exited(Option<i64>),
}

/// Resource limits of a session's sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Memory ceiling in bytes (swap is not allowed beyond it).
    pub memory_bytes: u64,
    /// CPU quota in billionths of a CPU.
    pub nano_cpus: u64,
    /// Most processes and threads at once.
    pub pids: u64,
    /// Bytes the workspace may hold (0: no quota). Enforced by the
    /// workspace's own filesystem, not by the engine.
    pub disk_bytes: u64,
    /// Files and directories the workspace may hold (0: no quota).
    pub inodes: u64,
}

/// Everything needed to start a session's container.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    /// Image reference.
    pub image: String,
    /// Host directory mounted read-write at /workspace: a path the service
    /// alone controls (see `volume`).
    pub workspace: PathBuf,
    /// Device and inode the workspace must still have when a container is
    /// started over it; `None` skips the check.
    pub workspace_identity: Option<(u64, u64)>,
    /// The engine binds `workspace` by a path the service does not control
    /// (a lent directory, when the service cannot mount): every container
    /// is then checked from inside, by its supervisor, to hold the
    /// directory of `workspace_identity` before any command runs, and no
    /// command ever runs without the supervisor.
    pub workspace_bound: bool,
    /// "uid:gid" the container and its commands run as.
    pub user: String,
    /// Environment of every command.
    pub env: BTreeMap<String, String>,
    /// Resource limits.
    pub limits: Limits,
    /// Size of the /tmp tmpfs in bytes.
    pub tmp_bytes: u64,
    /// Labels marking the container as this service's.
    pub labels: BTreeMap<String, String>,
    /// Container runtime (e.g. "runsc"); `None` for the engine default.
    pub runtime: Option<String>,
    /// Host path of a static sandboxd binary, mounted read-only as the
    /// in-container supervisor; `None` runs every command as its own exec.
    pub supervisor: Option<PathBuf>,
    /// Host directory mounted read-only at `/.sandboxd/run`, where the
    /// service listens for the supervisor; `None` uses the exec's stdio.
    pub socket_dir: Option<PathBuf>,
}

/// One process to run in a container.
#[derive(Debug, Clone)]
pub struct ExecSpec {
    /// argv.
    pub argv: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Absolute working directory inside the container.
    pub cwd: String,
    /// "uid:gid".
    pub user: String,
}

/// The seam to a container engine.
#[tonic::async_trait]
pub trait Runtime: Send + Sync + std::fmt::Debug {
    /// Makes sure `image` is present (building the default image if needed).
    async fn ensure_image(&self, image: &str) -> Result<(), Error>;
    /// Creates and starts a container; returns its id.
    async fn start_container(&self, spec: &ContainerSpec) -> Result<String, Error>;
    /// Kills a container at once (SIGKILL to everything in it).
    async fn kill_container(&self, id: &str) -> Result<(), Error>;
    /// Removes a container, running or not. A missing one is not an error.
    /// One the engine fails to remove is not forgotten: the runtime keeps
    /// trying until it is gone (see [`Runtime::pending_removals`]).
    async fn remove_container(&self, id: &str) -> Result<(), Error>;
    /// Containers a removal failed for and that are still being retried.
    fn pending_removals(&self) -> Vec<String> {
        Vec::new()
    }
    /// Removes every container bearing `label=value` (retried like
    /// [`Runtime::remove_container`] until the engine answers): for what an
    /// engine may have made after the call that asked for it gave up.
    async fn remove_all_labelled(&self, label: &str, value: &str) -> Result<usize, Error> {
        let _ = (label, value);
        Ok(0)
    }
    /// Starts a process in a container; returns the exec id and its output.
    async fn start_exec(
        &self,
        container: &str,
        spec: &ExecSpec,
    ) -> Result<(String, OutputStream), Error>;
    /// Like `start_exec`, with the exec's stdin attached.
    async fn start_exec_with_stdin(
        &self,
        container: &str,
        spec: &ExecSpec,
    ) -> Result<(String, OutputStream, InputSink), Error>;
    /// Whether an exec's main process still runs.
    async fn exec_state(&self, exec: &str) -> Result<ExecState, Error>;
    /// The host pid of an exec's main process, when the engine tells.
    async fn exec_pid(&self, _exec: &str) -> Option<i64> {
        None
    }
    /// How many processes of the container the kernel's OOM killer has
    /// ended so far; `None` when the engine cannot tell.
    async fn oom_kills(&self, _container: &str) -> Option<u64> {
        None
    }
    /// How many forks the container's process limit has refused so far;
    /// `None` when the engine cannot tell.
    async fn pids_refusals(&self, _container: &str) -> Option<u64> {
        None
    }
    /// Whether the container ended because the OOM killer struck (for a
    /// runtime such as gVisor, where that ends the whole sandbox).
    async fn died_of_oom(&self, _container: &str) -> bool {
        false
    }
    /// What the image store knows of `reference`; `None` when it lacks it.
    async fn image_info(&self, _reference: &str) -> Result<Option<ImageInfo>, Error> {
        Err(build::unsupported("inspect images"))
    }
    /// Every image carrying the label `key`, or every image when `None`.
    async fn list_images(&self, _label: Option<&str>) -> Result<Vec<ImageInfo>, Error> {
        Err(build::unsupported("list images"))
    }
    /// Starts building an image; the build runs while its stream is read
    /// and is cancelled when the stream is dropped.
    async fn build_image(&self, _spec: BuildSpec) -> Result<BuildStream, Error> {
        Err(build::unsupported("build images"))
    }
    /// Gives `image` (an id or a reference) the name `reference` as well.
    async fn tag_image(&self, _image: &str, _reference: &str) -> Result<(), Error> {
        Err(build::unsupported("tag images"))
    }
    /// Ids of the containers (running or not) made from `image` (an id).
    async fn containers_of_image(&self, _image: &str) -> Result<Vec<String>, Error> {
        Err(build::unsupported("list containers by image"))
    }
    /// Removes the name `reference`, and the image with its last name,
    /// unless a container still uses it: the engine then keeps the image,
    /// nameless (check [`Runtime::containers_of_image`] first). A missing
    /// name is not an error.
    async fn remove_image(&self, _reference: &str) -> Result<(), Error> {
        Err(build::unsupported("remove images"))
    }
    /// Removes every container carrying `label=value` whose `keep_label` is
    /// not `keep_value`; returns how many were removed.
    async fn remove_labelled(
        &self,
        label: &str,
        value: &str,
        keep_label: &str,
        keep_value: &str,
    ) -> Result<usize, Error>;
}

/// Labels every container of the service carries.
pub mod labels {
    /// The owning session id.
    pub const SESSION: &str = "sandboxd.session";
    /// The id of the service process that created the container.
    pub const INSTANCE: &str = "sandboxd.instance";
    /// The service name: instances with the same name are one service over
    /// time, so a new one removes what an old one leaked.
    pub const SERVICE: &str = "sandboxd.service";
    /// The id of the state directory of the instance that created the
    /// container: only one live instance holds a state directory (see
    /// `session::Registry::new`), so a container bearing ours and another
    /// instance's id was left by a dead instance, and no live one's
    /// container ever bears ours.
    pub const STATE: &str = "sandboxd.state";
}

/// The last rung of the kill ladder: kills `container`.
/// [`KilledBy::ContainerFailed`] when the engine fails to (the container is
/// then removed, and its removal retried until it is gone).
pub(crate) async fn hard_stop(rt: &dyn Runtime, container: &str) -> KilledBy {
    match rt.kill_container(container).await {
        Ok(()) => KilledBy::Container,
        Err(e) => {
            tracing::error!(container, error = %e, "the hard stop failed: the engine did not kill the container");
            let _ = rt.remove_container(container).await;
            KilledBy::ContainerFailed
        }
    }
}

/// The container of one session: started on demand, replaced after a hard
/// kill, removed with the session. Its owner is the session.
#[derive(Debug)]
pub struct Sandbox {
    runtime: Arc<dyn Runtime>,
    spec: ContainerSpec,
    container: tokio::sync::Mutex<Option<String>>,
    /// The supervisor link and the container it runs in.
    link: tokio::sync::Mutex<Option<(String, LinkState)>>,
}

/// The supervisor of one container.
#[derive(Debug, Clone)]
enum LinkState {
    Up(Arc<Link>),
    /// It could not be started in this container: its commands run as
    /// plain execs.
    Unavailable,
}

/// How a started command reaches its container.
#[derive(Debug)]
enum Via {
    /// Through the container's supervisor.
    Supervised(Supervised),
    /// As its own Docker exec (the fallback path).
    Exec(exec_fallback::Running),
}

/// A started command, ready to be driven to its end.
#[derive(Debug)]
pub struct Started {
    via: Via,
    /// What the caller must know about how it ran (e.g. the sandbox was
    /// replaced first); reported on its exit.
    notes: Vec<String>,
    /// Said on the exit if a limit stopped or cut the command.
    hints: LimitHints,
}

/// Said on the exit of a command during which the process limit refused a
/// fork.
pub const NOTE_PIDS: &str = "the sandbox's process limit was reached while this command ran, so some forks failed (\"Cannot fork\", \"Resource temporarily unavailable\"); if processes left running by earlier commands hold the limit, call ResetSandbox";

/// Said on the exit of a command that found its container's supervisor
/// link dead and got a fresh container instead.
pub const NOTE_REPLACED: &str = "the sandbox was replaced before this command ran: the link to its supervisor had been lost, so the old container was killed (processes left by earlier commands are gone; the workspace is intact)";

impl Started {
    /// The container the command runs in.
    pub fn container(&self) -> &str {
        match &self.via {
            Via::Supervised(s) => &s.container,
            Via::Exec(r) => r.container(),
        }
    }

    fn runtime(&self) -> Arc<dyn Runtime> {
        match &self.via {
            Via::Supervised(s) => Arc::clone(&s.rt),
            Via::Exec(r) => r.runtime(),
        }
    }

    /// Drives the command to its end (see the two paths' `drive`) and sends
    /// the final `Exit` while the receiver listens.
    pub async fn drive(self, events: tokio::sync::mpsc::Sender<Event>) -> ExitReport {
        let rt = self.runtime();
        let container = self.container().to_string();
        let oom_before = rt.oom_kills(&container).await;
        let pids_before = rt.pids_refusals(&container).await;
        let (mut report, client_gone) = match self.via {
            Via::Supervised(s) => s.drive(&events).await,
            Via::Exec(r) => r.drive(&events).await,
        };
        report.oom_killed = match (oom_before, rt.oom_kills(&container).await) {
            (Some(before), Some(after)) => after > before,
            // The cgroup went with the container.
            _ if report.killed_by == KilledBy::Container => rt.died_of_oom(&container).await,
            _ if report.killed_by == KilledBy::ContainerFailed => false,
            _ => false,
        };
        report.pids_exhausted = matches!(
            (pids_before, rt.pids_refusals(&container).await),
            (Some(before), Some(after)) if after > before
        );
        let mut notes = self.notes;
        notes.append(&mut report.notes);
        if report.pids_exhausted {
            notes.push(NOTE_PIDS.to_string());
        }
        let hints = self.hints;
        if report.timed_out && !hints.timed_out.is_empty() {
            notes.push(hints.timed_out);
        }
        if (report.stdout.truncated || report.stderr.truncated) && !hints.truncated.is_empty() {
            notes.push(hints.truncated);
        }
        report.notes = notes;
        if !client_gone {
            let _ = events.send(Event::Exit(report.clone())).await;
        }
        report
    }
}

impl Sandbox {
    /// A sandbox that will start containers from `spec`.
    pub fn new(runtime: Arc<dyn Runtime>, spec: ContainerSpec) -> Sandbox {
        Sandbox {
            runtime,
            spec,
            container: tokio::sync::Mutex::new(None),
            link: tokio::sync::Mutex::new(None),
        }
    }

    /// The container spec.
    pub fn spec(&self) -> &ContainerSpec {
        &self.spec
    }

    /// The running container's id, if one is up. Never waits: while a
    /// container is being started or replaced (which may wait on the
    /// engine), there is none up yet.
    pub async fn container_id(&self) -> Option<String> {
        self.container.try_lock().ok().and_then(|slot| slot.clone())
    }

    /// The container, started if there is none.
    pub async fn ensure(&self) -> Result<String, Error> {
        let mut slot = self.container.lock().await;
        if let Some(id) = slot.as_ref() {
            return Ok(id.clone());
        }
        self.runtime.ensure_image(&self.spec.image).await?;
        if let Some(dir) = &self.spec.socket_dir {
            supervisor::host::make_socket_dir(dir)?;
        }
        self.verify_workspace()?;
        let id = self.runtime.start_container(&self.spec).await?;
        *slot = Some(id.clone());
        drop(slot);
        // Start the supervisor now, so the first command does not wait for it.
        if self.spec.supervisor.is_some()
            && let Err(e) = self.link(&id).await
        {
            if self.spec.workspace_bound {
                // Whether the engine mounted another directory or the
                // supervisor could not say: nothing runs in this one.
                self.replace(&id).await;
                return Err(Error::WorkspaceGone(format!(
                    "{}: the container's workspace could not be confirmed to be the session's                      directory ({e}); the container was removed",
                    self.spec.workspace.display()
                )));
            }
            tracing::warn!(container = %id, error = %e, "supervisor unavailable; commands will run as plain execs");
        }
        Ok(id)
    }

    /// Checks that the workspace path still holds the session's directory,
    /// so the engine never mounts anything else.
    fn verify_workspace(&self) -> Result<(), Error> {
        let Some(identity) = self.spec.workspace_identity else {
            return Ok(());
        };
        let path = &self.spec.workspace;
        let gone = |why: String| Error::WorkspaceGone(format!("{}: {why}", path.display()));
        let st = if self.spec.workspace_bound {
            // The engine resolves this path itself: no symlink may lie
            // anywhere on it (a swapped ancestor is refused, not followed).
            use rustix::fs::{Mode, OFlags, ResolveFlags};
            rustix::fs::openat2(
                rustix::fs::CWD,
                path,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )
            .and_then(|fd| rustix::fs::fstat(&fd))
        } else {
            rustix::fs::statat(rustix::fs::CWD, path, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        }
        .map_err(|e| gone(e.to_string()))?;
        if (st.st_dev, st.st_ino) != identity {
            return Err(gone(
                "it no longer holds the session's directory; close the session".into(),
            ));
        }
        if st.st_nlink == 0 {
            return Err(gone(
                "the directory was removed from the host; close the session".into(),
            ));
        }
        Ok(())
    }

    /// The live supervisor link of `container`, started if it has none.
    /// A link that was up and died means the container ran untrusted code
    /// with no trusted supervisor: [`Error::LinkLost`], and the caller must
    /// replace the container rather than start another link in it.
    async fn link(&self, container: &str) -> Result<Arc<Link>, Error> {
        let mut slot = self.link.lock().await;
        match slot.as_ref() {
            Some((c, LinkState::Up(link))) if c == container => {
                return if link.confirm_alive().await {
                    Ok(Arc::clone(link))
                } else {
                    Err(Error::LinkLost)
                };
            }
            Some((c, LinkState::Unavailable)) if c == container => {
                return Err(Error::StartExec(
                    "the supervisor could not start in this container".into(),
                ));
            }
            _ => {}
        }
        let rt = &self.runtime;
        let user = &self.spec.user;
        let identity = self
            .spec
            .workspace_bound
            .then_some(self.spec.workspace_identity)
            .flatten();
        let started = match self.spec.socket_dir.as_deref() {
            Some(dir) => match Link::start(rt, container, user, Some(dir), identity).await {
                Ok(link) => Ok(link),
                Err(e) => {
                    // The engine's own stdio reaches containers a host
                    // socket cannot (gVisor).
                    tracing::info!(container, error = %e, "supervisor socket unreachable; framing over stdio");
                    Link::start(rt, container, user, None, identity).await
                }
            },
            None => Link::start(rt, container, user, None, identity).await,
        };
        match started {
            Ok(link) => {
                let link = Arc::new(link);
                *slot = Some((container.to_string(), LinkState::Up(Arc::clone(&link))));
                Ok(link)
            }
            Err(e) => {
                *slot = Some((container.to_string(), LinkState::Unavailable));
                Err(e)
            }
        }
    }

    /// Forgets and removes container `id` after it was killed as a hard
    /// stop; the next command starts a fresh one over the same workspace.
    pub async fn discard(&self, id: &str) {
        {
            let mut slot = self.container.lock().await;
            if slot.as_deref() == Some(id) {
                *slot = None;
            }
        }
        if let Err(e) = self.runtime.remove_container(id).await {
            tracing::warn!(container = %id, error = %e, "cannot remove killed container");
        }
    }

    /// Removes the container (session close) and its socket directory.
    pub async fn close(&self) -> Result<(), Error> {
        if let Some(dir) = &self.spec.socket_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        let id = self.container.lock().await.take();
        match id {
            Some(id) => self.runtime.remove_container(&id).await,
            None => Ok(()),
        }
    }

    /// Starts one command in the container (starting the container first
    /// if there is none): through the supervisor when one is configured and
    /// answers, else as its own exec. A container whose supervisor link died
    /// is replaced first, and the command's exit says so. Drive the result
    /// with [`Started::drive`], then call [`Sandbox::finished`].
    pub async fn start(&self, spec: CommandSpec) -> Result<Started, Error> {
        let mut notes = Vec::new();
        let hints = spec.hints.clone();
        let mut container = self.ensure().await?;
        if self.spec.supervisor.is_some() {
            match self.supervised(&container, &spec).await {
                Ok(via) => {
                    return Ok(Started { via, notes, hints });
                }
                Err(Error::LinkLost) => {
                    tracing::warn!(container = %container, "supervisor link lost; replacing the container");
                    self.replace(&container).await;
                    notes.push(NOTE_REPLACED.to_string());
                    container = self.ensure().await?;
                    match self.supervised(&container, &spec).await {
                        Ok(via) => return Ok(Started { via, notes, hints }),
                        Err(e) if self.spec.workspace_bound => return Err(e),
                        Err(e) => {
                            tracing::warn!(container = %container, error = %e, "supervisor unavailable; running as a plain exec")
                        }
                    }
                }
                // A workspace only the supervisor can vouch for is never
                // worked on without it.
                Err(e) if self.spec.workspace_bound => return Err(e),
                Err(e) => {
                    tracing::warn!(container = %container, error = %e, "supervisor unavailable; running as a plain exec")
                }
            }
        }
        match exec_fallback::start(
            Arc::clone(&self.runtime),
            &container,
            &self.spec.user,
            self.host_signals(),
            spec.clone(),
        )
        .await
        {
            Ok(running) => Ok(Started {
                via: Via::Exec(running),
                notes,
                hints,
            }),
            // The container may have died under us (killed from outside):
            // start a fresh one once and retry.
            Err(e) if !matches!(e, Error::Connect(_) | Error::EngineTimeout) => {
                tracing::warn!(container = %container, error = %e, "exec failed; replacing the container");
                self.discard(&container).await;
                let container = self.ensure().await?;
                if self.spec.supervisor.is_some()
                    && let Ok(via) = self.supervised(&container, &spec).await
                {
                    return Ok(Started { via, notes, hints });
                }
                exec_fallback::start(
                    Arc::clone(&self.runtime),
                    &container,
                    &self.spec.user,
                    self.host_signals(),
                    spec,
                )
                .await
                .map(|running| Started {
                    via: Via::Exec(running),
                    notes,
                    hints,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the kill ladder of plain execs can signal from the host:
    /// not under gVisor, whose processes live in its own kernel.
    fn host_signals(&self) -> bool {
        self.spec.runtime.as_deref() != Some("runsc")
    }

    /// Kills and removes `container` (its processes were not supervised by
    /// a trusted link), so the next [`Sandbox::ensure`] starts a fresh one.
    async fn replace(&self, container: &str) {
        if let Err(e) = self.runtime.kill_container(container).await {
            tracing::warn!(container, error = %e, "cannot kill container");
        }
        self.discard(container).await;
    }

    /// Kills the session's container and forgets it, keeping the workspace:
    /// background processes, a fork bomb, anything left running is gone.
    /// The next command (or this call, with `restart`) starts a fresh one.
    pub async fn reset(&self, restart: bool) -> Result<Option<String>, Error> {
        let current = self.container.lock().await.clone();
        if let Some(id) = current {
            self.replace(&id).await;
        }
        if restart {
            self.ensure().await.map(Some)
        } else {
            Ok(None)
        }
    }

    async fn supervised(&self, container: &str, spec: &CommandSpec) -> Result<Via, Error> {
        let link = self.link(container).await?;
        let started = std::time::Instant::now();
        // The link was up: failing to hand it a command means it died (the
        // reader may not have noticed yet), and the container with it is no
        // longer trusted. Never fall back to a plain exec there.
        let (id, frames) = link.spawn(spec).await.map_err(|e| {
            tracing::warn!(container, error = %e, "the supervisor link died");
            Error::LinkLost
        })?;
        Ok(Via::Supervised(Supervised {
            rt: Arc::clone(&self.runtime),
            link,
            container: container.to_string(),
            id,
            frames,
            spec: spec.clone(),
            started,
        }))
    }

    /// Bookkeeping after a command ended: a container killed as the hard
    /// stop is replaced before the next command.
    pub async fn finished(&self, container: &str, report: &ExitReport) {
        if matches!(
            report.killed_by,
            KilledBy::Container | KilledBy::ContainerFailed
        ) {
            self.discard(container).await;
        }
    }

    /// The runtime (for the registry's startup sweep).
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }
}
