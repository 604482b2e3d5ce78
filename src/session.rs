//! The session registry: which sessions exist, the workspace each one owns,
//! when each was last used, and closing them (on request, on idle timeout,
//! and at shutdown). A fresh workspace belongs to its session and is removed
//! with it; an existing directory named by the caller is only borrowed.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;

pub mod defaults;

use crate::error::describe;
use crate::journal::{Journal, Report};
use crate::policy::guard::{Refusal, SlipGuard};
use crate::policy::{CommandDenied, Denial, InvalidRules, Policy, Rules};
use crate::sandbox::{self, CommandSpec, ContainerSpec, Event, Runtime, Sandbox, labels};
use crate::state::StateDir;
use crate::volume::{Quota, Volume, Volumes};
use crate::workspace::lock::PathLocks;
use crate::workspace::{
    CreateOutput, EditOutput, EditSpec, FindOutput, Limits, ListOutput, ReadOutput, SearchOutput,
    SearchQuery, Workspace,
};

/// Why a session call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No open session has this id.
    #[error("session {id:?} does not exist")]
    NotFound {
        /// The id as given.
        id: String,
    },
    /// The caller named a directory outside every allowed root.
    #[error("{path} is not under an allowed workspace root")]
    WorkspaceNotAllowed {
        /// The path as given.
        path: String,
        /// The roots the operator allows.
        allowed: Vec<PathBuf>,
    },
    /// The caller named a directory that holds, or lies in, the service's
    /// own state.
    #[error("{path} overlaps the service's state directory")]
    OverlapsState {
        /// The path as given.
        path: String,
    },
    /// The caller named a directory that cannot be opened.
    #[error("workspace {path} cannot be opened: {source}")]
    OpenWorkspace {
        /// The path as given.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The service holds its ceiling of sessions.
    #[error("the service already holds {limit} sessions")]
    TooMany {
        /// The ceiling.
        limit: usize,
    },
    /// A fresh workspace directory could not be made.
    #[error("cannot create a workspace directory: {0}")]
    CreateWorkspace(io::Error),
    /// A requested limit is above the operator's ceiling.
    #[error("{what} {asked} is above the ceiling {max}")]
    LimitExceeded {
        /// Which limit.
        what: &'static str,
        /// The requested value.
        asked: u64,
        /// The ceiling.
        max: u64,
    },
    /// The slip guard refused the command.
    #[error("command refused: {}", .0.reason)]
    CommandRefused(Refusal),
    /// Session policy refuses the call.
    #[error("refused by policy: {0:?}")]
    Denied(Denial),
    /// The requested policy does not compile.
    #[error(transparent)]
    InvalidPolicy(#[from] InvalidRules),
    /// The journal file cannot be opened.
    #[error("cannot open the journal: {0}")]
    Journal(io::Error),
    /// The image is not one the operator allows.
    #[error("image {image} is not allowed")]
    ImageNotAllowed {
        /// The image asked for.
        image: String,
        /// The images the operator allows.
        allowed: Vec<String>,
    },
    /// The workspace volume cannot be made or pinned.
    #[error(transparent)]
    Volume(#[from] crate::volume::Error),
    /// A request field is malformed.
    #[error("invalid {field}: {why}")]
    InvalidArgument {
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

/// Why the registry cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The state directory or its volumes cannot be used.
    #[error(transparent)]
    Volumes(#[from] crate::volume::Error),
    /// An allowed root does not exist.
    #[error("allowed root {root}: {source}")]
    AllowedRoot {
        /// The root as configured.
        root: PathBuf,
        /// Why it cannot be resolved.
        source: io::Error,
    },
}

/// Operator settings for sessions.
#[derive(Debug, Clone)]
pub struct Config {
    /// The service's private state directory (fresh workspaces, pins,
    /// supervisor sockets); created 0700 if missing, refused if unsafe.
    pub state_dir: PathBuf,
    /// Existing host directories may be used as workspaces only under these.
    pub allowed_roots: Vec<PathBuf>,
    /// Idle timeout when the request says 0.
    pub default_ttl: Duration,
    /// Ceiling on a requested idle timeout.
    pub max_ttl: Duration,
    /// Ceiling on open sessions.
    pub max_sessions: usize,
    /// Deny globs for writes in every session (sessions can add more).
    pub deny_writes: Vec<String>,
    /// Directory where each session's journal is appended as JSON lines.
    pub journal_dir: Option<PathBuf>,
    /// File tool limits.
    pub limits: Limits,
    /// Containers and commands.
    pub sandbox: SandboxConfig,
}

/// Operator settings for containers and commands.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Image when the request names none (always allowed).
    pub default_image: String,
    /// Further images sessions may name; any other is refused.
    pub allowed_images: Vec<String>,
    /// "uid:gid" for containers when the workspace is owned by root.
    pub default_user: (u32, u32),
    /// Limits when the request gives none.
    pub default_limits: sandbox::Limits,
    /// Ceilings on requested limits.
    pub max_limits: sandbox::Limits,
    /// Size of each container's /tmp.
    pub tmp_bytes: u64,
    /// Container runtime (e.g. "runsc"); `None` for the engine default.
    pub runtime: Option<String>,
    /// Service name: containers of earlier instances with this name are
    /// removed at startup.
    pub service: String,
    /// This process's id, on every container it starts.
    pub instance: String,
    /// Command timeout when the request gives none.
    pub default_timeout: Duration,
    /// Ceiling on a requested timeout.
    pub max_timeout: Duration,
    /// Characters kept per stream when the request gives none.
    pub default_cap: u64,
    /// Ceiling on a requested cap.
    pub max_cap: u64,
    /// The slip guard.
    pub guard: SlipGuard,
    /// Environment of every container; a session's own env overrides it.
    pub default_env: BTreeMap<String, String>,
    /// Host path of the static sandboxd binary mounted as the in-container
    /// supervisor; `None` runs each command as its own Docker exec.
    pub supervisor: Option<PathBuf>,
    /// Warm containers kept ready for new fresh-workspace sessions.
    pub pool_size: usize,
    /// The supervisor connects to a socket the service listens on (Docker
    /// on this host only); otherwise frames travel over the supervisor
    /// exec's stdio.
    pub socket_link: bool,
}

impl SandboxConfig {
    /// Defaults for service `service`.
    pub fn new(service: &str) -> SandboxConfig {
        SandboxConfig {
            default_image: sandbox::image::default_image(),
            allowed_images: Vec::new(),
            default_user: (1000, 1000),
            default_limits: sandbox::Limits {
                memory_bytes: defaults::MEMORY_BYTES,
                nano_cpus: defaults::NANO_CPUS,
                pids: defaults::PIDS,
                disk_bytes: defaults::DISK_BYTES,
                inodes: defaults::INODES,
            },
            max_limits: sandbox::Limits {
                memory_bytes: defaults::MAX_MEMORY_BYTES,
                nano_cpus: defaults::MAX_NANO_CPUS,
                pids: defaults::MAX_PIDS,
                disk_bytes: defaults::MAX_DISK_BYTES,
                inodes: defaults::MAX_INODES,
            },
            tmp_bytes: defaults::TMP_BYTES,
            runtime: None,
            service: service.to_string(),
            instance: uuid::Uuid::new_v4().simple().to_string()[..16].to_string(),
            default_timeout: Duration::from_millis(defaults::TIMEOUT_MS),
            max_timeout: Duration::from_millis(defaults::MAX_TIMEOUT_MS),
            default_cap: defaults::OUTPUT_CAP,
            max_cap: defaults::MAX_OUTPUT_CAP,
            guard: SlipGuard::new(true, &[])
                .unwrap_or_else(|_| unreachable!("built-in rules compile")),
            supervisor: None,
            pool_size: 0,
            socket_link: false,
            default_env: BTreeMap::from([
                ("HOME".to_string(), "/tmp".to_string()),
                ("LANG".to_string(), "C.UTF-8".to_string()),
                // Python caches bytecode keyed on the source's mtime in whole
                // seconds and its size: an edit in the same second as the
                // last run, keeping the size, would run stale code.
                ("PYTHONDONTWRITEBYTECODE".to_string(), "1".to_string()),
            ]),
        }
    }
}

impl Config {
    /// Defaults suitable for one machine, with state in `state_dir`; no
    /// existing directories allowed.
    pub fn new(state_dir: PathBuf) -> Self {
        Config {
            state_dir,
            allowed_roots: Vec::new(),
            default_ttl: Duration::from_secs(defaults::TTL_SECS),
            max_ttl: Duration::from_secs(defaults::MAX_TTL_SECS),
            max_sessions: defaults::MAX_SESSIONS,
            deny_writes: Vec::new(),
            journal_dir: None,
            limits: Limits {
                max_file_bytes: defaults::MAX_FILE_BYTES,
                ..Limits::default()
            },
            sandbox: SandboxConfig::new(defaults::SERVICE_NAME),
        }
    }
}

/// What the caller asks of a new session.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// Existing host directory to work in; `None` for a fresh workspace.
    pub workspace_path: Option<String>,
    /// Idle timeout; zero means the default.
    pub ttl: Duration,
    /// Image; `None` for the default.
    pub image: Option<String>,
    /// Limits; zero fields mean the default.
    pub limits: sandbox::Limits,
    /// Environment of every command.
    pub env: BTreeMap<String, String>,
    /// The session's own policy rules (added to the operator's).
    pub rules: Rules,
}

/// What the caller asks of a command.
#[derive(Debug, Clone, Default)]
pub struct CommandRequest {
    /// Shell command line.
    pub command: String,
    /// Working directory relative to the workspace.
    pub cwd: String,
    /// Timeout; zero means the default.
    pub timeout: Duration,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Characters kept of stdout; zero means the default.
    pub stdout_cap: u64,
    /// Characters kept of stderr; zero means the default.
    pub stderr_cap: u64,
}

/// One open session.
#[derive(Debug)]
pub struct Session {
    /// Opaque id.
    pub id: String,
    /// The file tools over this session's workspace.
    pub workspace: Workspace,
    /// The session's container.
    pub sandbox: Sandbox,
    /// What the session may write and run.
    pub policy: Arc<Policy>,
    /// Every call, for audit.
    pub journal: Journal,
    /// Environment of every command of the session (over the container's).
    env: BTreeMap<String, String>,
    sandbox_status: Mutex<Option<String>>,
    /// The workspace as containers mount it; taken at close.
    volume: Mutex<Option<Volume>>,
    owns_workspace: bool,
    /// Commands running now: a session with one is never idle.
    running: std::sync::atomic::AtomicUsize,
    ttl: Duration,
    created: SystemTime,
    last_used: Mutex<(Instant, SystemTime)>,
}

/// A snapshot of a session for replies.
#[derive(Debug, Clone)]
pub struct Info {
    /// Opaque id.
    pub id: String,
    /// Host path of the workspace.
    pub workspace_path: PathBuf,
    /// The service created the workspace and removes it on close.
    pub owns_workspace: bool,
    /// Idle timeout.
    pub ttl: Duration,
    /// Creation time.
    pub created: SystemTime,
    /// Time of the last call.
    pub last_used: SystemTime,
    /// Image of the container.
    pub image: String,
    /// The running container, if one is up.
    pub container_id: Option<String>,
    /// Container limits.
    pub limits: sandbox::Limits,
    /// Why commands cannot run now, if they cannot.
    pub sandbox_status: Option<String>,
    /// The policy rules in force.
    pub rules: Rules,
}

/// What resetting a session's sandbox did.
#[derive(Debug, Clone)]
pub struct Reset {
    /// The session's id (unchanged).
    pub id: String,
    /// The fresh container.
    pub container_id: String,
    /// One-line summary.
    pub message: String,
}

/// What closing a session did.
#[derive(Debug, Clone)]
pub struct Closed {
    /// The closed session's id.
    pub id: String,
    /// The workspace directory was removed (it belonged to the session).
    pub workspace_removed: bool,
    /// The session's journal, as it stood at the end.
    pub report: Report,
}

fn plural_edits(n: usize) -> String {
    if n == 1 {
        "1 edit".to_string()
    } else {
        format!("{n} edits")
    }
}

impl Session {
    /// A snapshot for replies.
    pub async fn info(&self) -> Info {
        let (_, last_used) = *self.last_used.lock().unwrap_or_else(|e| e.into_inner());
        Info {
            id: self.id.clone(),
            workspace_path: self.workspace.host_path().to_path_buf(),
            owns_workspace: self.owns_workspace,
            ttl: self.ttl,
            created: self.created,
            last_used,
            image: self.sandbox.spec().image.clone(),
            container_id: self.sandbox.container_id().await,
            limits: self.sandbox.spec().limits,
            sandbox_status: self
                .sandbox_status
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            rules: self.policy.rules().clone(),
        }
    }

    /// GetSession: a snapshot, journaled.
    pub async fn get_info(&self) -> Info {
        let started = Instant::now();
        let info = self.info().await;
        self.journal.ok("GetSession", "", started, String::new());
        info
    }

    /// Records the outcome of a call that writes nothing.
    fn journaled<T>(
        &self,
        tool: &'static str,
        summary: &str,
        started: Instant,
        result: Result<T, crate::error::Error>,
        detail: impl FnOnce(&T) -> String,
    ) -> Result<T, crate::error::Error> {
        match &result {
            Ok(out) => self.journal.ok(tool, summary, started, detail(out)),
            Err(e) => self.refused(tool, summary, started, e),
        }
        result
    }

    fn refused(
        &self,
        tool: &'static str,
        summary: &str,
        started: Instant,
        e: &crate::error::Error,
    ) {
        let told = describe(e);
        self.journal
            .refused(tool, summary, started, told.reason, told.message);
    }

    /// ResetSandbox: kills the container (and everything left running in
    /// it) and starts a fresh one over the same workspace.
    pub async fn reset_sandbox(&self) -> Result<Reset, crate::error::Error> {
        let started = Instant::now();
        let result = match self.policy.check_mutation("ResetSandbox") {
            Ok(()) => self.sandbox.reset(true).await.map_err(Into::into),
            Err(denial) => Err(Error::Denied(denial).into()),
        };
        let result = result.map(|container| {
            let container_id = container.unwrap_or_default();
            self.set_sandbox_status(None);
            Reset {
                id: self.id.clone(),
                message: format!(
                    "the sandbox was reset: container {} replaced the old one, whose processes are gone; the workspace is unchanged",
                    &container_id[..container_id.len().min(12)]
                ),
                container_id,
            }
        });
        self.journaled("ResetSandbox", "", started, result, |r| {
            r.container_id.clone()
        })
    }

    /// ReadFile.
    pub async fn read_file(
        &self,
        path: &str,
        offset: u64,
        limit: u64,
    ) -> Result<ReadOutput, crate::error::Error> {
        let started = Instant::now();
        let result = self.workspace.read(path, offset, limit).await;
        let summary = format!("{path:?} offset {offset} limit {limit}");
        self.journaled(
            "ReadFile",
            &summary,
            started,
            result.map_err(Into::into),
            |o| o.message.clone(),
        )
    }

    /// Records the outcome of a write: where it landed and the file's
    /// hashes before (`None`: it did not exist) and after.
    fn journaled_write<T>(
        &self,
        tool: &'static str,
        summary: &str,
        started: Instant,
        result: Result<T, crate::workspace::Error>,
        landed: impl FnOnce(&T) -> (String, Option<String>, String),
    ) -> Result<T, crate::error::Error> {
        match result {
            Ok(out) => {
                let (path, before, after) = landed(&out);
                self.journal
                    .wrote(tool, summary, started, path, before, after);
                Ok(out)
            }
            Err(e) => {
                let e = e.into();
                self.refused(tool, summary, started, &e);
                Err(e)
            }
        }
    }

    /// CreateFile, within the session's policy.
    pub async fn create_file(
        &self,
        path: &str,
        content: String,
    ) -> Result<CreateOutput, crate::error::Error> {
        let started = Instant::now();
        let summary = format!("{path:?} ({} bytes)", content.len());
        let result = match self.policy.check_mutation("CreateFile") {
            Ok(()) => self.workspace.create(path, content, &self.policy).await,
            Err(denial) => Err(crate::workspace::Error::Denied(denial)),
        };
        self.journaled_write("CreateFile", &summary, started, result, |o| {
            (o.landed.clone(), None, o.sha256.clone())
        })
    }

    /// EditFile, within the session's policy.
    pub async fn edit_file(
        &self,
        path: &str,
        edits: Vec<EditSpec>,
        expected_sha256: Option<String>,
    ) -> Result<EditOutput, crate::error::Error> {
        let started = Instant::now();
        let summary = format!("{path:?} ({})", plural_edits(edits.len()));
        let result = match self.policy.check_mutation("EditFile") {
            Ok(()) => {
                self.workspace
                    .edit(path, edits, expected_sha256, &self.policy)
                    .await
            }
            Err(denial) => Err(crate::workspace::Error::Denied(denial)),
        };
        self.journaled_write("EditFile", &summary, started, result, |o| {
            (
                o.landed.clone(),
                Some(o.sha256_before.clone()),
                o.sha256.clone(),
            )
        })
    }

    /// ListDir.
    pub async fn list_dir(&self, path: &str) -> Result<ListOutput, crate::error::Error> {
        let started = Instant::now();
        let result = self.workspace.list_dir(path).await;
        self.journaled(
            "ListDir",
            &format!("{path:?}"),
            started,
            result.map_err(Into::into),
            |o| format!("{} entries", o.entries.len()),
        )
    }

    /// FindFiles.
    pub async fn find(
        &self,
        pattern: &str,
        path: &str,
        limit: u64,
    ) -> Result<FindOutput, crate::error::Error> {
        let started = Instant::now();
        let result = self.workspace.find(pattern, path, limit).await;
        let summary = format!("{pattern:?} under {path:?}");
        self.journaled(
            "FindFiles",
            &summary,
            started,
            result.map_err(Into::into),
            |o| format!("{} paths", o.paths.len()),
        )
    }

    /// SearchFiles.
    pub async fn search(&self, query: SearchQuery) -> Result<SearchOutput, crate::error::Error> {
        let started = Instant::now();
        let summary = format!("/{}/ under {:?}", query.pattern, query.path);
        let result = self.workspace.search(query).await;
        self.journaled(
            "SearchFiles",
            &summary,
            started,
            result.map_err(Into::into),
            |o| format!("{} matches", o.matches.len()),
        )
    }

    /// The journal reconciled against `planned` files (none: no plan) and a
    /// `verify` command.
    pub async fn report(
        &self,
        planned: &[String],
        verify: Option<&str>,
    ) -> Result<Report, crate::error::Error> {
        let started = Instant::now();
        let mut normalised = Vec::with_capacity(planned.len());
        for path in planned {
            match self.workspace.landing(path).await {
                Ok(p) => normalised.push(p),
                Err(e) => {
                    let e = e.into();
                    self.refused("GetSessionReport", "planned_files", started, &e);
                    return Err(e);
                }
            }
        }
        let plan = (!planned.is_empty()).then_some(normalised.as_slice());
        let report = self.journal.report(plan, verify);
        let summary = format!("{} planned files", planned.len());
        self.journal
            .ok("GetSessionReport", &summary, started, String::new());
        Ok(report)
    }

    fn set_sandbox_status(&self, status: Option<String>) {
        *self
            .sandbox_status
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = status;
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) =
            (Instant::now(), SystemTime::now());
    }

    fn idle_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_used.lock().unwrap_or_else(|e| e.into_inner()).0)
    }
}

/// All open sessions of the service.
#[derive(Debug)]
pub struct Registry {
    config: Config,
    runtime: Arc<dyn Runtime>,
    locks: Arc<PathLocks>,
    volumes: Arc<Volumes>,
    /// Where journals are appended, checked like the state directory.
    journal_dir: Option<Arc<StateDir>>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    pool: Arc<Pool>,
}

impl Registry {
    /// A registry keeping its state in `config.state_dir` (made if
    /// missing, refused if another user could change it).
    pub fn new(config: Config, runtime: Arc<dyn Runtime>) -> Result<Registry, StartError> {
        let state = StateDir::open(&config.state_dir).map_err(crate::volume::Error::State)?;
        let volumes = Arc::new(Volumes::open(&state)?);
        let journal_dir = match &config.journal_dir {
            Some(dir) => Some(Arc::new(
                StateDir::open(dir).map_err(crate::volume::Error::State)?,
            )),
            None => None,
        };
        let allowed_roots = config
            .allowed_roots
            .iter()
            .map(|root| {
                std::fs::canonicalize(root).map_err(|source| StartError::AllowedRoot {
                    root: root.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Registry {
            config: Config {
                allowed_roots,
                ..config
            },
            runtime,
            locks: Arc::new(PathLocks::default()),
            volumes,
            journal_dir,
            sessions: Mutex::new(HashMap::new()),
            pool: Arc::new(Pool::default()),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session and starts its container. If the engine is
    /// unreachable the session still opens (file tools work) and its
    /// `sandbox_status` says why commands cannot run yet.
    pub async fn create(&self, req: NewSession) -> Result<Info, crate::error::Error> {
        if self.table().len() >= self.config.max_sessions {
            return Err(Error::TooMany {
                limit: self.config.max_sessions,
            }
            .into());
        }
        let limits = self.limits(req.limits, req.workspace_path.is_some())?;
        check_env("env", &req.env)?;
        let policy = Arc::new(
            Policy::new(
                &self.config.deny_writes,
                &self.config.sandbox.guard,
                req.rules.clone(),
            )
            .map_err(Error::InvalidPolicy)?,
        );
        let ttl = match req.ttl {
            Duration::ZERO => self.config.default_ttl,
            ttl => ttl.min(self.config.max_ttl),
        };
        let cfg = &self.config.sandbox;
        let image = req.image.unwrap_or_else(|| cfg.default_image.clone());
        if image != cfg.default_image && !cfg.allowed_images.contains(&image) {
            let mut allowed = vec![cfg.default_image.clone()];
            allowed.extend(cfg.allowed_images.iter().cloned());
            return Err(Error::ImageNotAllowed { image, allowed }.into());
        }
        let warm = (req.workspace_path.is_none()
            && image == cfg.default_image
            && limits == cfg.default_limits)
            .then(|| self.pool.take())
            .flatten();
        let pooled = warm.is_some();
        let Prepared {
            id,
            workspace,
            volume,
            sandbox,
        } = match warm {
            Some(warm) => warm,
            None => {
                prepare(
                    &self.config,
                    &self.runtime,
                    &self.locks,
                    &self.volumes,
                    req.workspace_path,
                    image,
                    limits,
                )
                .await?
            }
        };
        if pooled {
            self.fill_pool();
        }
        let journal = match Journal::new(&id, self.journal_dir.as_deref()) {
            Ok(journal) => journal,
            Err(e) => {
                discard(Prepared {
                    id,
                    workspace,
                    volume,
                    sandbox,
                })
                .await;
                return Err(Error::Journal(e).into());
            }
        };
        let owns_workspace = volume.owns_workspace();
        let now = SystemTime::now();
        let session = Arc::new(Session {
            id,
            workspace,
            sandbox,
            policy,
            journal,
            env: req.env,
            sandbox_status: Mutex::new(None),
            owns_workspace,
            volume: Mutex::new(Some(volume)),
            running: std::sync::atomic::AtomicUsize::new(0),
            ttl,
            created: now,
            last_used: Mutex::new((Instant::now(), now)),
        });
        // Checked again under the lock: other creates ran while we worked.
        let admitted = {
            let mut table = self.table();
            let admitted = table.len() < self.config.max_sessions;
            if admitted {
                table.insert(session.id.clone(), Arc::clone(&session));
            }
            admitted
        };
        if !admitted {
            let _ = session.sandbox.close().await;
            remove_volume(&session).await;
            return Err(Error::TooMany {
                limit: self.config.max_sessions,
            }
            .into());
        }
        match session.sandbox.ensure().await {
            Ok(_) => {}
            Err(e @ sandbox::Error::ImageMissing { .. }) => {
                let _ = self.close(&session.id).await;
                return Err(e.into());
            }
            Err(e) => {
                tracing::warn!(session = %session.id, error = %e, "session opened without a container");
                session.set_sandbox_status(Some(e.to_string()));
            }
        }
        let info = session.info().await;
        let summary = format!(
            "workspace {}, image {}, read_only {}",
            info.workspace_path.display(),
            info.image,
            info.rules.read_only
        );
        session
            .journal
            .ok("CreateSession", &summary, Instant::now(), String::new());
        tracing::info!(session = %info.id, workspace = %info.workspace_path.display(), container = ?info.container_id, pooled, "session created");
        Ok(info)
    }

    /// Limits for a request: defaults for zero fields, refused above the
    /// ceilings. A lent directory has no disk quota (it is not the
    /// service's filesystem), and asking for one there is refused.
    fn limits(&self, asked: sandbox::Limits, lent: bool) -> Result<sandbox::Limits, Error> {
        let cfg = &self.config.sandbox;
        let pick = |what: &'static str, asked: u64, default: u64, max: u64| match asked {
            0 => Ok(default),
            n if n > max => Err(Error::LimitExceeded {
                what,
                asked: n,
                max,
            }),
            n => Ok(n),
        };
        Ok(sandbox::Limits {
            memory_bytes: pick(
                "memory_bytes",
                asked.memory_bytes,
                cfg.default_limits.memory_bytes,
                cfg.max_limits.memory_bytes,
            )?,
            nano_cpus: pick(
                "nano_cpus",
                asked.nano_cpus,
                cfg.default_limits.nano_cpus,
                cfg.max_limits.nano_cpus,
            )?,
            pids: pick(
                "pids",
                asked.pids,
                cfg.default_limits.pids,
                cfg.max_limits.pids,
            )?,
            disk_bytes: pick(
                "disk_bytes",
                asked.disk_bytes,
                cfg.default_limits.disk_bytes,
                cfg.max_limits.disk_bytes,
            )?
            .max(crate::volume::MIN_DISK_BYTES),
            inodes: pick(
                "inodes",
                asked.inodes,
                cfg.default_limits.inodes,
                cfg.max_limits.inodes,
            )?
            .max(crate::volume::MIN_INODES),
        })
        .and_then(|limits| {
            if !lent {
                return Ok(limits);
            }
            if asked.disk_bytes != 0 || asked.inodes != 0 {
                return Err(Error::InvalidArgument {
                    field: "limits",
                    why: "disk_bytes and inodes apply to fresh workspaces only: an existing \
                          directory lives on the host's own filesystem, which the service \
                          does not size; leave them 0"
                        .into(),
                });
            }
            Ok(sandbox::Limits {
                disk_bytes: 0,
                inodes: 0,
                ..limits
            })
        })
    }

    /// The session `id`, marked as used now.
    pub fn get(&self, id: &str) -> Result<Arc<Session>, Error> {
        let session = self
            .table()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound { id: id.to_string() })?;
        session.touch();
        Ok(session)
    }

    /// Snapshots of all sessions, oldest first.
    pub async fn list(&self) -> Vec<Info> {
        let sessions: Vec<Arc<Session>> = self.table().values().cloned().collect();
        let mut all = Vec::with_capacity(sessions.len());
        for s in sessions {
            all.push(s.info().await);
        }
        all.sort_by_key(|i| i.created);
        all
    }

    /// Closes `id`: removes its container, and its workspace if the
    /// session owns it.
    pub async fn close(&self, id: &str) -> Result<Closed, Error> {
        let session = self
            .table()
            .remove(id)
            .ok_or_else(|| Error::NotFound { id: id.to_string() })?;
        if let Err(e) = session.sandbox.close().await {
            tracing::warn!(session = %id, error = %e, "cannot remove the session's container");
        }
        let workspace_removed = remove_volume(&session).await;
        tracing::info!(session = %id, workspace_removed, "session closed");
        let detail = if workspace_removed {
            "workspace removed"
        } else {
            "workspace left in place"
        };
        session
            .journal
            .ok("CloseSession", "", Instant::now(), detail.to_string());
        Ok(Closed {
            id: id.to_string(),
            workspace_removed,
            report: session.journal.report(None, None),
        })
    }

    /// Checks a command against the guard and the ceilings, starts it, and
    /// returns its events (`Started`, chunks, `Exit`). Dropping the receiver
    /// cancels the command (the kill ladder runs).
    pub async fn run_command(
        &self,
        id: &str,
        req: CommandRequest,
    ) -> Result<mpsc::Receiver<Event>, crate::error::Error> {
        let session = self.get(id)?;
        let started = Instant::now();
        let command = req.command.clone();
        let spec = match self.command_spec(&session, req).await {
            Ok(spec) => spec,
            Err(e) => {
                session.refused("RunCommand", &command, started, &e);
                return Err(e);
            }
        };
        let cwd = spec.cwd.clone();
        let seq = session.journal.next_seq();
        let busy = Busy::new(&session);
        let running = match session.sandbox.start(spec).await {
            Ok(running) => {
                session.set_sandbox_status(None);
                running
            }
            Err(e) => {
                session.set_sandbox_status(Some(e.to_string()));
                let e = e.into();
                session.refused("RunCommand", &command, started, &e);
                return Err(e);
            }
        };
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let container = running.container().to_string();
            let report = running.drive(tx).await;
            session
                .journal
                .command(seq, &command, &cwd, started, &report);
            session.sandbox.finished(&container, &report).await;
            drop(busy);
        });
        Ok(rx)
    }

    async fn command_spec(
        &self,
        session: &Session,
        req: CommandRequest,
    ) -> Result<CommandSpec, crate::error::Error> {
        let cfg = &self.config.sandbox;
        if req.command.trim().is_empty() {
            return Err(Error::InvalidArgument {
                field: "command",
                why: "it is empty".into(),
            }
            .into());
        }
        if req.command.contains('\0') {
            return Err(Error::InvalidArgument {
                field: "command",
                why: "it contains a NUL byte".into(),
            }
            .into());
        }
        session
            .policy
            .check_command(&req.command)
            .map_err(|denied| match denied {
                CommandDenied::Policy(denial) => Error::Denied(denial),
                CommandDenied::Guard(refusal) => Error::CommandRefused(refusal),
            })?;
        check_env("env", &req.env)?;
        let timeout = match req.timeout {
            Duration::ZERO => cfg.default_timeout,
            t if t > cfg.max_timeout => {
                return Err(Error::LimitExceeded {
                    what: "timeout_ms",
                    asked: t.as_millis() as u64,
                    max: cfg.max_timeout.as_millis() as u64,
                }
                .into());
            }
            t => t,
        };
        let cap = |what: &'static str, asked: u64| match asked {
            0 => Ok(cfg.default_cap),
            n if n > cfg.max_cap => Err(Error::LimitExceeded {
                what,
                asked: n,
                max: cfg.max_cap,
            }),
            n => Ok(n),
        };
        let stdout_cap = cap("stdout_cap", req.stdout_cap)?;
        let stderr_cap = cap("stderr_cap", req.stderr_cap)?;
        // The workspace root needs no lookup (and no trip to the blocking pool).
        let cwd = if matches!(req.cwd.as_str(), "" | "." | "/workspace") {
            String::new()
        } else {
            session.workspace.real_dir(&req.cwd).await?
        };
        let env = session.env.clone().into_iter().chain(req.env).collect();
        Ok(CommandSpec {
            command: req.command,
            cwd: if cwd.is_empty() {
                "/workspace".into()
            } else {
                format!("/workspace/{cwd}")
            },
            env,
            timeout,
            stdout_cap: stdout_cap as usize,
            stderr_cap: stderr_cap as usize,
        })
    }

    /// Removes what an earlier instance of this service leaked: containers
    /// labelled with our service name but another instance id, then the
    /// workspaces, pins and sockets no live session uses. Returns the
    /// number of containers removed.
    pub async fn sweep_leaked(&self) -> Result<usize, crate::error::Error> {
        let cfg = &self.config.sandbox;
        // Containers first: a volume is unmounted only once nothing uses it.
        let removed = self
            .runtime
            .remove_labelled(
                labels::SERVICE,
                &cfg.service,
                labels::INSTANCE,
                &cfg.instance,
            )
            .await?;
        if removed > 0 {
            tracing::info!(removed, "removed containers leaked by an earlier instance");
        }
        self.sweep_volumes().await;
        Ok(removed)
    }

    /// Removes the workspaces, pins and sockets no live or pooled session
    /// uses (left by an earlier instance that died).
    pub async fn sweep_volumes(&self) {
        let mut live: Vec<String> = self.table().keys().cloned().collect();
        live.extend(self.pool.ids());
        let volumes = Arc::clone(&self.volumes);
        let swept = tokio::task::spawn_blocking(move || volumes.sweep(&live)).await;
        if let Ok(n) = swept
            && n > 0
        {
            tracing::info!(removed = n, "removed stale workspaces");
        }
    }

    /// Closes every session idle past its TTL; returns their ids.
    pub async fn reap_expired(&self) -> Vec<String> {
        let now = Instant::now();
        // A running command is activity: its session waits for it to end.
        let expired: Vec<String> = self
            .table()
            .values()
            .filter(|s| s.running.load(std::sync::atomic::Ordering::SeqCst) == 0)
            .filter(|s| s.idle_for(now) >= s.ttl)
            .map(|s| s.id.clone())
            .collect();
        let mut closed = Vec::new();
        for id in expired {
            if self.close(&id).await.is_ok() {
                tracing::info!(session = %id, "session expired");
                closed.push(id);
            }
        }
        closed
    }

    /// Tops the pool of warm containers up to its configured size, in the
    /// background.
    pub fn fill_pool(&self) {
        self.pool
            .fill(&self.config, &self.runtime, &self.locks, &self.volumes);
    }

    /// Warm containers ready now (for tests and the benchmark).
    pub fn pool_ready(&self) -> usize {
        self.pool.ready()
    }

    /// Closes every session and empties the pool (at shutdown).
    pub async fn close_all(&self) {
        for warm in self.pool.drain() {
            discard(warm).await;
        }
        self.pool.settled().await;
        let ids: Vec<String> = self.table().keys().cloned().collect();
        for id in ids {
            let _ = self.close(&id).await;
        }
    }
}

/// Marks a session busy while one of its commands runs: the idle clock
/// restarts when the command ends.
struct Busy(Arc<Session>);

impl Busy {
    fn new(session: &Arc<Session>) -> Busy {
        session
            .running
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Busy(Arc::clone(session))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0
            .running
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A session-to-be: workspace and (not yet started) sandbox.
struct Prepared {
    id: String,
    workspace: Workspace,
    volume: Volume,
    sandbox: Sandbox,
}

/// Opens the workspace and builds the sandbox of a new session.
async fn prepare(
    config: &Config,
    runtime: &Arc<dyn Runtime>,
    locks: &Arc<PathLocks>,
    volumes: &Arc<Volumes>,
    workspace_path: Option<String>,
    image: String,
    limits: sandbox::Limits,
) -> Result<Prepared, Error> {
    let id = new_id();
    let (cfg, locks, ws_volumes, ws_id) = (
        config.clone(),
        Arc::clone(locks),
        Arc::clone(volumes),
        id.clone(),
    );
    let quota = Quota {
        disk_bytes: limits.disk_bytes,
        inodes: limits.inodes,
    };
    let (workspace, volume) = tokio::task::spawn_blocking(move || {
        open_workspace(&cfg, locks, &ws_volumes, &ws_id, workspace_path, quota)
    })
    .await
    .map_err(|e| Error::CreateWorkspace(io::Error::other(e.to_string())))??;
    let cfg = &config.sandbox;
    let (uid, gid) = command_user(workspace.owner(), cfg.default_user);
    // What the session really has: no quota where none is enforced.
    let limits = match volume.quota() {
        Some(q) => sandbox::Limits {
            disk_bytes: q.disk_bytes,
            inodes: q.inodes,
            ..limits
        },
        None => sandbox::Limits {
            disk_bytes: 0,
            inodes: 0,
            ..limits
        },
    };
    let spec = ContainerSpec {
        image,
        workspace: volume.path().to_path_buf(),
        workspace_identity: Some(volume.identity()),
        user: format!("{uid}:{gid}"),
        env: cfg.default_env.clone(),
        limits,
        tmp_bytes: cfg.tmp_bytes,
        labels: BTreeMap::from([
            (labels::SESSION.to_string(), id.clone()),
            (labels::INSTANCE.to_string(), cfg.instance.clone()),
            (labels::SERVICE.to_string(), cfg.service.clone()),
        ]),
        runtime: cfg.runtime.clone(),
        supervisor: cfg.supervisor.clone(),
        socket_dir: cfg.socket_link.then(|| volumes.socket_root().join(&id)),
    };
    Ok(Prepared {
        id,
        workspace,
        volume,
        sandbox: Sandbox::new(Arc::clone(runtime), spec),
    })
}

/// Warm sessions-to-be: fresh workspaces whose container (default image,
/// default limits, the same hardening as any other) already runs with its
/// supervisor, so a new session starts without waiting for Docker. Each
/// carries its future session id in its labels, so it is swept like any
/// other container if the service dies.
#[derive(Default)]
struct Pool {
    ready: Mutex<std::collections::VecDeque<Prepared>>,
    filling: std::sync::atomic::AtomicUsize,
    /// Set at shutdown: fills still in flight discard what they made.
    closed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("ready", &self.ready())
            .finish_non_exhaustive()
    }
}

impl Pool {
    fn take(&self) -> Option<Prepared> {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    fn ready(&self) -> usize {
        self.ready.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Ids of the warm entries ready now.
    fn ids(&self) -> Vec<String> {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|p| p.id.clone())
            .collect()
    }

    /// Closes the pool for good and returns what was ready. Fills still in
    /// flight clean up after themselves; [`Pool::settled`] waits for them.
    fn drain(&self) -> Vec<Prepared> {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect()
    }

    /// Waits (bounded) until no fill is in flight.
    async fn settled(&self) {
        let until = Instant::now() + Duration::from_secs(30);
        while self.filling.load(std::sync::atomic::Ordering::SeqCst) > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts enough background fills to reach the configured size.
    fn fill(
        self: &Arc<Self>,
        config: &Config,
        runtime: &Arc<dyn Runtime>,
        locks: &Arc<PathLocks>,
        volumes: &Arc<Volumes>,
    ) {
        use std::sync::atomic::Ordering;
        let want = config.sandbox.pool_size;
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            let filling = self.filling.load(Ordering::SeqCst);
            if self.ready() + filling >= want {
                return;
            }
            if self
                .filling
                .compare_exchange(filling, filling + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                continue;
            }
            let (pool, config, runtime, locks, volumes) = (
                Arc::clone(self),
                config.clone(),
                Arc::clone(runtime),
                Arc::clone(locks),
                Arc::clone(volumes),
            );
            tokio::spawn(async move {
                let image = config.sandbox.default_image.clone();
                let limits = config.sandbox.default_limits;
                match prepare(&config, &runtime, &locks, &volumes, None, image, limits).await {
                    Ok(warm) => {
                        let started = warm.sandbox.ensure().await;
                        if let Err(e) = &started {
                            tracing::debug!(error = %e, "cannot warm a container");
                        }
                        // Decided under the lock drain takes: an entry is
                        // either drained at shutdown or discarded here.
                        let leftover = {
                            let mut ready = pool.ready.lock().unwrap_or_else(|e| e.into_inner());
                            if started.is_ok() && !pool.closed.load(Ordering::SeqCst) {
                                ready.push_back(warm);
                                None
                            } else {
                                Some(warm)
                            }
                        };
                        if let Some(warm) = leftover {
                            discard(warm).await;
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot prepare a warm workspace"),
                }
                pool.filling.fetch_sub(1, Ordering::SeqCst);
            });
        }
    }
}

/// Removes a warm entry that will not be used: its container and workspace.
async fn discard(warm: Prepared) {
    if let Err(e) = warm.sandbox.close().await {
        tracing::warn!(error = %e, "cannot remove a pooled container");
    }
    let volume = warm.volume;
    let _ = tokio::task::spawn_blocking(move || volume.remove()).await;
}

/// Who a session's commands run as: the workspace's owner, with the
/// owner's own primary group (never the directory's group, which may be
/// root's or another privileged one the owner does not have); the default
/// user for a root-owned workspace.
fn command_user(owner: (u32, u32), default: (u32, u32)) -> (u32, u32) {
    match owner {
        (0, _) => default,
        (uid, _) => (
            uid,
            primary_gid(uid)
                .filter(|&gid| gid != 0)
                .unwrap_or(default.1),
        ),
    }
}

/// The primary group of `uid` in the host's /etc/passwd.
fn primary_gid(uid: u32) -> Option<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let (_, _, u, g) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        (u.parse::<u32>().ok()? == uid)
            .then(|| g.parse().ok())
            .flatten()
    })
}

/// Environment names must be non-empty and free of `=` and NUL.
fn check_env(field: &'static str, env: &BTreeMap<String, String>) -> Result<(), Error> {
    for (k, v) in env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(Error::InvalidArgument {
                field,
                why: format!(
                    "{k:?} is not a valid variable (names are non-empty, without '=' or NUL)"
                ),
            });
        }
    }
    Ok(())
}

fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}

/// Opens the workspace of session `id`: a fresh volume, or an existing
/// directory under an allowed root, pinned for its containers.
fn open_workspace(
    config: &Config,
    locks: Arc<PathLocks>,
    volumes: &Volumes,
    id: &str,
    path: Option<String>,
    quota: Quota,
) -> Result<(Workspace, Volume), Error> {
    let Some(path) = path else {
        let volume = volumes.fresh(id, quota, config.sandbox.default_user)?;
        return match Workspace::open(volume.path(), locks, config.limits.clone()) {
            Ok(ws) => Ok((ws, volume)),
            Err(e) => {
                let _ = volume.remove();
                Err(Error::CreateWorkspace(e))
            }
        };
    };
    let not_allowed = || Error::WorkspaceNotAllowed {
        path: path.clone(),
        allowed: config.allowed_roots.clone(),
    };
    if !Path::new(&path).is_absolute() {
        return Err(not_allowed());
    }
    let ws = Workspace::open(Path::new(&path), locks, config.limits.clone()).map_err(|source| {
        Error::OpenWorkspace {
            path: path.clone(),
            source,
        }
    })?;
    // Checked on the path of the opened fd, so a symlink swapped in after
    // the check cannot redirect the session.
    if !config
        .allowed_roots
        .iter()
        .any(|root| ws.host_path().starts_with(root))
    {
        return Err(not_allowed());
    }
    // The service's own files (other sessions' volumes, the journals, the
    // supervisor binary) are never lent.
    let own = [
        Some(config.state_dir.as_path()),
        config.journal_dir.as_deref(),
        config.sandbox.supervisor.as_deref(),
    ];
    let host = ws.host_path();
    if own
        .into_iter()
        .flatten()
        .any(|p| host.starts_with(p) || p.starts_with(host))
    {
        return Err(Error::OverlapsState { path });
    }
    // Containers mount a pin of this very directory, never its path.
    let volume = volumes.pin(id, ws.root_fd(), ws.host_path())?;
    Ok((ws, volume))
}

/// Unmounts the session's volume (removing its workspace if the session
/// owns it); true when a workspace was removed.
async fn remove_volume(session: &Session) -> bool {
    let volume = session
        .volume
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let Some(volume) = volume else { return false };
    let owned = volume.owns_workspace();
    match tokio::task::spawn_blocking(move || volume.remove()).await {
        Ok(Ok(())) => owned,
        Ok(Err(e)) => {
            tracing::warn!(session = %session.id, error = %e, "cannot remove the workspace volume");
            false
        }
        Err(e) => {
            tracing::warn!(session = %session.id, error = %e, "workspace removal task failed");
            false
        }
    }
}
