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
//! - [`container`]: [`Sandbox`], the owner of one session's container,
//!   which starts it, checks its workspace, and picks the path for each
//!   command;
//! - [`process`]: long-running processes, always under the supervisor.

pub mod build;
pub mod capture;
pub mod command;
pub mod container;
pub mod docker;
pub mod exec_fallback;
pub mod file_table;
pub mod image;
pub mod metered;
pub mod process;
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
pub use container::{NOTE_PIDS, NOTE_REPLACED, Sandbox, Started};
pub use process::{Process, ProcessEvent, ProcessEvents, ProcessExit, ProcessSignal, ProcessSpec};

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
    /// `workspace` is a slot (see `volume`): a container started before it
    /// is lent a directory, which reaches its `/workspace` later by
    /// propagation. Bound with slave propagation: mounts made at
    /// `workspace` on the host's side reach the container, nothing of the
    /// container's reaches the host.
    pub workspace_slot: bool,
    /// `workspace` is a directory of the host's lent to the session, not
    /// one the service made for it: it may hold the host's Unix sockets,
    /// which a container whose runtime could reach them must not get (see
    /// [`runsc::LINKED`]).
    pub workspace_lent: bool,
    /// What puts the workspace at `workspace` for the moment a container
    /// is started over it, and takes it away once the container has its
    /// own mount; `None`: `workspace` is always there (the service's own
    /// directory, or one the engine binds by its path).
    pub workspace_mount: Option<Arc<dyn WorkspaceMount>>,
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
    /// Host path of the container's main process with a supervisor,
    /// mounted read-only (see [`supervisor::idle`]); `None`: the
    /// supervisor binary's `idle`.
    pub idle: Option<PathBuf>,
    /// Host directory mounted read-only at `/.sandboxd/run`, where the
    /// service listens for the supervisor; `None` uses the exec's stdio.
    pub socket_dir: Option<PathBuf>,
}

/// A workspace mounted on the host only while a container is started over
/// it. A lent directory is a user's own files: a mount of it left in the
/// service's state directory would be deleted with that directory by a
/// plain `rm -rf` once the service is gone, so it is there only from just
/// before the engine binds it until the container has its own copy of the
/// mount (which the host's unmount does not touch: the mount is private).
pub trait WorkspaceMount: Send + Sync + std::fmt::Debug {
    /// Mounts the workspace at the spec's `workspace` path, checked to be
    /// the session's directory. Blocking.
    fn mount(&self) -> std::io::Result<()>;
    /// Unmounts it from the host again; whatever is left there the next
    /// mount or the volume's removal takes away. Blocking; never fails
    /// (what it cannot do it logs).
    fn unmount(&self);
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
    /// Ends every process of the container at once, without the engine
    /// (its container then exits; removing it is still the engine's).
    /// False when that cannot be done here: the caller then kills it
    /// through the engine.
    async fn kill_now(&self, _container: &str) -> bool {
        false
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
    /// Whether sessions can start containers from image `reference`:
    /// refused ([`Error::ImageUnusable`]) where a declared VOLUME or a
    /// symlink at a path the sandbox mounts on would move or hide the
    /// workspace or the supervisor. `owner`: the labels of the service's
    /// containers, for any the check makes.
    async fn check_image(
        &self,
        _reference: &str,
        _owner: &BTreeMap<String, String>,
    ) -> Result<(), Error> {
        Ok(())
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
