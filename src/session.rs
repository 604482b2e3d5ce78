//! The session registry: which sessions exist, the workspace each one owns,
//! when each was last used, and closing them (on request, on idle timeout,
//! and at shutdown). A fresh workspace belongs to its session and is removed
//! with it; an existing directory named by the caller is only borrowed.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tempfile::TempDir;

use crate::workspace::lock::PathLocks;
use crate::workspace::{Limits, Workspace};

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
}

/// Operator settings for sessions.
#[derive(Debug, Clone)]
pub struct Config {
    /// Directory under which fresh workspaces are created.
    pub workspace_dir: PathBuf,
    /// Existing host directories may be used as workspaces only under these.
    pub allowed_roots: Vec<PathBuf>,
    /// Idle timeout when the request says 0.
    pub default_ttl: Duration,
    /// Ceiling on a requested idle timeout.
    pub max_ttl: Duration,
    /// Ceiling on open sessions.
    pub max_sessions: usize,
    /// File tool limits.
    pub limits: Limits,
}

impl Config {
    /// Defaults suitable for one machine: workspaces under the system temp
    /// directory, no existing directories allowed.
    pub fn new(workspace_dir: PathBuf) -> Self {
        Config {
            workspace_dir,
            allowed_roots: Vec::new(),
            default_ttl: Duration::from_secs(3600),
            max_ttl: Duration::from_secs(24 * 3600),
            max_sessions: 256,
            limits: Limits::default(),
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
}

/// One open session.
#[derive(Debug)]
pub struct Session {
    /// Opaque id.
    pub id: String,
    /// The file tools over this session's workspace.
    pub workspace: Workspace,
    owned: Mutex<Option<TempDir>>,
    owns_workspace: bool,
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
}

/// What closing a session did.
#[derive(Debug, Clone)]
pub struct Closed {
    /// The closed session's id.
    pub id: String,
    /// The workspace directory was removed (it belonged to the session).
    pub workspace_removed: bool,
}

impl Session {
    /// A snapshot for replies.
    pub fn info(&self) -> Info {
        let (_, last_used) = *self.last_used.lock().unwrap_or_else(|e| e.into_inner());
        Info {
            id: self.id.clone(),
            workspace_path: self.workspace.host_path().to_path_buf(),
            owns_workspace: self.owns_workspace,
            ttl: self.ttl,
            created: self.created,
            last_used,
        }
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
    locks: Arc<PathLocks>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl Registry {
    /// A registry creating fresh workspaces under `config.workspace_dir`
    /// (made if missing).
    pub fn new(config: Config) -> io::Result<Registry> {
        std::fs::create_dir_all(&config.workspace_dir)?;
        let allowed_roots = config
            .allowed_roots
            .iter()
            .map(std::fs::canonicalize)
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Registry {
            config: Config {
                allowed_roots,
                ..config
            },
            locks: Arc::new(PathLocks::default()),
            sessions: Mutex::new(HashMap::new()),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session.
    pub async fn create(&self, req: NewSession) -> Result<Info, Error> {
        if self.table().len() >= self.config.max_sessions {
            return Err(Error::TooMany {
                limit: self.config.max_sessions,
            });
        }
        let config = self.config.clone();
        let locks = Arc::clone(&self.locks);
        let (workspace, owned) =
            tokio::task::spawn_blocking(move || open_workspace(&config, locks, req.workspace_path))
                .await
                .map_err(|e| Error::CreateWorkspace(io::Error::other(e.to_string())))??;
        let ttl = match req.ttl {
            Duration::ZERO => self.config.default_ttl,
            ttl => ttl.min(self.config.max_ttl),
        };
        let now = SystemTime::now();
        let session = Arc::new(Session {
            id: new_id(),
            workspace,
            owns_workspace: owned.is_some(),
            owned: Mutex::new(owned),
            ttl,
            created: now,
            last_used: Mutex::new((Instant::now(), now)),
        });
        let info = session.info();
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
            remove_workspace(&session).await;
            return Err(Error::TooMany {
                limit: self.config.max_sessions,
            });
        }
        tracing::info!(session = %info.id, workspace = %info.workspace_path.display(), "session created");
        Ok(info)
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
    pub fn list(&self) -> Vec<Info> {
        let mut all: Vec<Info> = self.table().values().map(|s| s.info()).collect();
        all.sort_by_key(|i| i.created);
        all
    }

    /// Closes `id`, removing its workspace if the session owns it.
    pub async fn close(&self, id: &str) -> Result<Closed, Error> {
        let session = self
            .table()
            .remove(id)
            .ok_or_else(|| Error::NotFound { id: id.to_string() })?;
        let workspace_removed = remove_workspace(&session).await;
        tracing::info!(session = %id, workspace_removed, "session closed");
        Ok(Closed {
            id: id.to_string(),
            workspace_removed,
        })
    }

    /// Closes every session idle past its TTL; returns their ids.
    pub async fn reap_expired(&self) -> Vec<String> {
        let now = Instant::now();
        let expired: Vec<String> = self
            .table()
            .values()
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

    /// Closes every session (at shutdown).
    pub async fn close_all(&self) {
        let ids: Vec<String> = self.table().keys().cloned().collect();
        for id in ids {
            let _ = self.close(&id).await;
        }
    }
}

fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}

fn open_workspace(
    config: &Config,
    locks: Arc<PathLocks>,
    path: Option<String>,
) -> Result<(Workspace, Option<TempDir>), Error> {
    let Some(path) = path else {
        let dir = tempfile::Builder::new()
            .prefix("ws-")
            .tempdir_in(&config.workspace_dir)
            .map_err(Error::CreateWorkspace)?;
        let ws = Workspace::open(dir.path(), locks, config.limits.clone())
            .map_err(Error::CreateWorkspace)?;
        return Ok((ws, Some(dir)));
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
    Ok((ws, None))
}

/// Removes the session's own workspace, if it has one; true when removed.
async fn remove_workspace(session: &Session) -> bool {
    let owned = session
        .owned
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let Some(dir) = owned else { return false };
    let path = dir.path().to_path_buf();
    match tokio::task::spawn_blocking(move || dir.close()).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove workspace");
            false
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "workspace removal task failed");
            false
        }
    }
}
