//! The session registry: which sessions exist, the workspace each one owns,
//! when each was last used, and closing them (on request, on idle timeout,
//! and at shutdown). A fresh workspace belongs to its session and is removed
//! with it; an existing directory named by the caller is only borrowed.
//!
//! Every open session has a record in the state directory, and its journal
//! a file: a service that restarts, however it stopped, brings its sessions
//! back ([`Registry::recover`]) with their ids, tokens, workspaces, policy
//! and journals. Their containers are not kept: a container that ran while
//! no service watched it is not trusted (what its commands left running
//! went on unsupervised), so each comes back with a fresh one on its next
//! command, and a command cut short is journaled as interrupted.
//!
//! One job per file: this one holds the table and lookups; each file
//! below uses only this one and files listed after it:
//! - `close`: closing sessions (on request, on idle timeout, at
//!   shutdown), their removal finished after the answer;
//! - `recover`: sessions brought back at start;
//! - `open`: opening a session;
//! - `pools`: the warm pools and the environments;
//! - `sweep`: what an earlier instance leaked.

mod approve;
mod close;
mod open;
mod pools;
mod recover;
mod sweep;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use super::approvals::Approvals;
use super::builds::Builds;
use super::config::Config;
use super::error::{Error, StartError, Token};
use super::messages::{Caller, Info};
use super::pool::Pool;
use super::records::Records;
use super::tools::Session;
use crate::journal::{self, Journal};
use crate::policy::Policy;
use crate::sandbox::Runtime;
use crate::state::StateDir;
use crate::volume::Volumes;
use crate::workspace::lock::PathLocks;

/// What the operator's journal directory is called in errors about it.
const JOURNAL_DIR: &str = "journal directory (--journal-dir)";

/// The lock a live instance holds in its state directory.
const LIVE_LOCK: &str = "instance.lock";

/// The id of a state directory, made the first time it is used: labels
/// the containers of every instance over it.
fn state_id(state: &StateDir) -> std::io::Result<String> {
    const NAME: &str = "state-id";
    if let Some(bytes) = state.read(NAME)? {
        let id = String::from_utf8_lossy(&bytes).trim().to_string();
        if !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(id);
        }
    }
    let id = crate::secret::random_hex()[..16].to_string();
    state.write_atomic(NAME, id.as_bytes())?;
    Ok(id)
}

/// How every session token begins (so a leaked one is recognised, e.g. by
/// secret scanners).
pub const SESSION_TOKEN_PREFIX: &str = "sbxs_";

/// All open sessions of the service.
#[derive(Debug)]
pub struct Registry {
    config: Arc<Config>,
    runtime: Arc<dyn Runtime>,
    locks: Arc<PathLocks>,
    volumes: Arc<Volumes>,
    /// The operator's journal directory, checked like the state directory
    /// (the journal of builds goes there).
    journal_dir: Option<journal::Files>,
    /// Where each session's journal is appended: the operator's journal
    /// directory, or the state directory's `journals`.
    journals: journal::Files,
    /// The open sessions' records.
    records: Records,
    /// Where a durable service keeps its sessions (`None`: not durable).
    keep: Option<super::records::Keep>,
    /// Held while this instance lives, so that no other one uses the state
    /// directory (the kernel lets go of it however the process ends).
    _live: std::os::fd::OwnedFd,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The sha256 of each open session's token, to its session's id.
    tokens: Mutex<HashMap<[u8; 32], String>>,
    /// Warm entries of the default image.
    pool: Arc<Pool>,
    /// Warm entries of the default image for sessions over an existing
    /// directory, lent it when taken.
    lent_pool: Arc<Pool>,
    /// Warm entries of each environment the operator named.
    environment_pools: BTreeMap<String, Arc<Pool>>,
    builds: Arc<Builds>,
    /// Plans and calls waiting for a person.
    approvals: Arc<Approvals>,
    /// Closed sessions whose container and workspace are being removed.
    teardowns: tokio_util::task::TaskTracker,
    /// Closed sessions whose container is still being removed.
    closing: Arc<close::Closing>,
}

impl Registry {
    /// A registry keeping its state in `config.state_dir` (made if
    /// missing, refused if another user could change it).
    pub fn new(config: Config, runtime: Arc<dyn Runtime>) -> Result<Registry, StartError> {
        let (uid, _) = config.sandbox.default_user;
        if let Some(holder) = super::prepare::holder_of(uid) {
            tracing::warn!(
                uid,
                "commands run as uid {uid}, which is {holder}: that user can reach running commands \
                 (their view through /proc, signals); choose an id nobody has (serve --command-user)"
            );
        }
        // Engine calls are measured where the operator asked for metrics.
        let runtime: Arc<dyn Runtime> = match &config.metrics {
            Some(m) => Arc::new(crate::sandbox::metered::Metered::new(
                runtime,
                Arc::clone(m),
            )),
            None => runtime,
        };
        let state = StateDir::open(&config.state_dir).map_err(crate::volume::Error::State)?;
        let state_err = |source| StartError::State {
            path: config.state_dir.clone(),
            source,
        };
        let live = state
            .try_lock(LIVE_LOCK)
            .map_err(state_err)?
            .ok_or_else(|| StartError::InUse {
                path: config.state_dir.clone(),
            })?;
        let state_id = state_id(&state).map_err(state_err)?;
        let volumes = Arc::new(Volumes::open(&state)?);
        let files = |dir: StateDir| journal::Files {
            dir: Arc::new(dir),
            max_bytes: config.journal_max_bytes,
        };
        let journal_dir = match &config.journal_dir {
            Some(dir) => Some(files(
                StateDir::open_as(dir, JOURNAL_DIR).map_err(crate::volume::Error::State)?,
            )),
            None => None,
        };
        let journals = match &journal_dir {
            Some(files) => files.clone(),
            None => files(
                state
                    .child("journals")
                    .map_err(crate::volume::Error::State)?,
            ),
        };
        let records = Records::open(&state).map_err(crate::volume::Error::State)?;
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
        let mut sandbox = config.sandbox.clone();
        sandbox.state_id = state_id;
        if sandbox.supervisor.is_some() {
            sandbox.idle = crate::sandbox::supervisor::idle::install(state.path());
        }
        let durable = config.durable;
        let config = Arc::new(Config {
            allowed_roots,
            sandbox,
            ..config
        });
        let builds = Builds::new(
            Arc::clone(&config),
            Arc::clone(&runtime),
            journal_dir.as_ref(),
        )
        .map_err(StartError::Journal)?;
        let approvals = Arc::new(Approvals::new(config.approvals));
        Ok(Registry {
            environment_pools: config
                .sandbox
                .environment_pools
                .keys()
                .map(|name| (name.clone(), Arc::new(Pool::default())))
                .collect(),
            config,
            runtime,
            locks: Arc::new(PathLocks::default()),
            volumes,
            journal_dir,
            keep: durable.then(|| super::records::Keep {
                records: records.clone(),
                journals: journals.clone(),
            }),
            journals,
            records,
            _live: live,
            sessions: Mutex::new(HashMap::new()),
            tokens: Mutex::new(HashMap::new()),
            pool: Arc::new(Pool::default()),
            lent_pool: Arc::new(Pool::for_lent()),
            builds: Arc::new(builds),
            approvals,
            teardowns: tokio_util::task::TaskTracker::new(),
            closing: Arc::default(),
        })
    }

    fn table(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The service's counters in Prometheus's text format, the gauges
    /// read now; `None` when nothing is measured.
    pub fn encode_metrics(&self) -> Option<String> {
        let m = self.config.metrics.as_ref()?;
        m.sessions_open.set(self.table().len() as i64);
        let ready = self.pool.ready()
            + self.lent_pool.ready()
            + self
                .environment_pools
                .values()
                .map(|p| p.ready())
                .sum::<usize>();
        m.pool_ready.set(ready as i64);
        m.engine_pending_removals
            .set(self.runtime.pending_removals().len() as i64);
        Some(m.encode())
    }

    /// Forgets a session that is gone: its record, and its journal's files
    /// unless the operator keeps journals.
    async fn forget(&self, id: &str) {
        if let Err(e) = self.records.remove(id) {
            tracing::warn!(session = %id, error = %e, "cannot remove the session's record");
        }
        if self.journal_dir.is_none() {
            Journal::remove_files(id, &self.journals);
        }
    }

    /// The operator's rules narrowed by a session's own.
    fn policy(&self, rules: crate::policy::Rules) -> Result<Arc<Policy>, Error> {
        Policy::new(&self.config.rules, &self.config.sandbox.guard, rules)
            .map(Arc::new)
            .map_err(Error::InvalidPolicy)
    }

    /// An upload's turn among the service's upload slots: taken before its
    /// stream is read, so waiting uploads hold no memory and no thread.
    pub async fn upload_turn(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        // The slot is taken by `Session::upload_archive`, after the
        // session's own share and write turn: taken here, first, a session
        // waiting on itself would sit on slots other sessions need.
        None
    }

    fn token_table(&self) -> MutexGuard<'_, HashMap<[u8; 32], String>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open session whose token `token` is, if any.
    pub fn session_of_token(&self, token: &[u8]) -> Option<String> {
        // Looked up by hash: how long it takes tells nothing of the token.
        self.token_table()
            .get(&crate::secret::sha256(token))
            .cloned()
    }

    /// Where the service's counters go, if it is measured.
    pub fn metrics(&self) -> Option<Arc<crate::metrics::Metrics>> {
        self.config.metrics.clone()
    }

    /// Whether the session `id` is open (not closed, expired or never
    /// made).
    pub fn is_open(&self, id: &str) -> bool {
        self.table().contains_key(id)
    }

    /// The session `id`, if `caller` may use it, marked as used now. A
    /// session the caller may not use is not found, exactly as one that
    /// does not exist (whether it exists is not told).
    pub fn get(&self, caller: &Caller, id: &str) -> Result<Arc<Session>, Error> {
        if *caller == Caller::Approver {
            return Err(Error::NotPermitted {
                token: Token::Approver,
                what: "act on a session",
            });
        }
        let session = self
            .table()
            .get(id)
            .filter(|_| caller.may_use(id))
            .cloned()
            .ok_or_else(|| Error::NotFound { id: id.to_string() })?;
        session.touch();
        Ok(session)
    }

    /// Session `id` as [`Registry::get`] finds it, for a viewer who only
    /// looks: its idle clock is not touched, so watching a session never
    /// keeps it alive.
    pub fn observe(&self, caller: &Caller, id: &str) -> Result<Arc<Session>, Error> {
        if *caller == Caller::Approver {
            return Err(Error::NotPermitted {
                token: Token::Approver,
                what: "act on a session",
            });
        }
        self.table()
            .get(id)
            .filter(|_| caller.may_use(id))
            .cloned()
            .ok_or_else(|| Error::NotFound { id: id.to_string() })
    }

    /// [`Registry::admin_only`] for a call of `tool`: a session's token
    /// refused is journaled in its session, as its other refusals are.
    pub fn operator_only(
        &self,
        caller: &Caller,
        tool: &'static str,
        what: &'static str,
    ) -> Result<(), Error> {
        let refused = Self::admin_only(caller, what);
        if refused.is_err()
            && let Caller::Session(id) = caller
        {
            let session = self.table().get(id).cloned();
            if let Some(session) = session {
                let told = crate::session::failure::Error::from(Error::NotPermitted {
                    token: Token::Session,
                    what,
                });
                session.refused(tool, "", std::time::Instant::now(), &told);
            }
        }
        refused
    }

    /// Refuses a call that is not about one session to a session's token.
    pub fn admin_only(caller: &Caller, what: &'static str) -> Result<(), Error> {
        match caller {
            Caller::Admin => Ok(()),
            Caller::Session(_) => Err(Error::NotPermitted {
                token: Token::Session,
                what,
            }),
            Caller::Approver => Err(Error::NotPermitted {
                token: Token::Approver,
                what,
            }),
        }
    }

    /// The table of what waits for a person, for an approver (the
    /// operator or the approver token) only.
    pub fn approvals(&self, caller: &Caller) -> Result<&Approvals, Error> {
        match caller {
            Caller::Admin | Caller::Approver => Ok(&self.approvals),
            Caller::Session(_) => Err(Error::NotPermitted {
                token: Token::Session,
                what: "list or decide approvals (only an approver can)",
            }),
        }
    }

    /// Snapshots of the sessions `caller` may use, oldest first.
    pub async fn list(&self, caller: &Caller) -> Vec<Info> {
        let sessions: Vec<Arc<Session>> = self
            .table()
            .values()
            .filter(|s| caller.may_use(&s.id))
            .cloned()
            .collect();
        let mut all = Vec::with_capacity(sessions.len());
        for s in sessions {
            all.push(s.info().await);
        }
        all.sort_by_key(|i| i.created);
        all
    }
}
