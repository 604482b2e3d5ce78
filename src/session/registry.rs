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

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use super::builds::{BuildEvents, Builds};
use super::config::Config;
use super::error::{Error, StartError};
use super::failure;
use super::messages::{
    Caller, Closed, EnvironmentInfo, Info, NewEnvironment, NewSession, check_env,
};
use super::pool::Pool;
use super::prepare::{Prepared, discard, prepare, reopen};
use super::records::{Place, Record, Records};
use super::tools::Session;
use crate::environment::Environment;
use crate::journal::{self, Journal};
use crate::policy::Policy;
use crate::sandbox::{self, Runtime, image, labels};
use crate::state::StateDir;
use crate::volume::Volumes;
use crate::workspace::history::{History, HistoryLimits};
use crate::workspace::lock::PathLocks;

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
    /// Warm entries of each environment the operator named.
    environment_pools: BTreeMap<String, Arc<Pool>>,
    builds: Arc<Builds>,
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
                StateDir::open(dir).map_err(crate::volume::Error::State)?,
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
            builds: Arc::new(builds),
        })
    }

    fn table(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session and starts its container. If the engine is
    /// unreachable the session still opens (file tools work) and its
    /// `sandbox_status` says why commands cannot run yet; if it takes the
    /// calls and does not answer in time, no session is opened. The work is
    /// done apart from the caller: a caller that gives up (its call
    /// cancelled, its deadline passed) leaves nothing behind, however far
    /// the opening had got.
    pub async fn create(self: &Arc<Self>, req: NewSession) -> Result<Info, failure::Error> {
        let started = Instant::now();
        let caller = tokio_util::sync::CancellationToken::new();
        let _gone_when_dropped = caller.clone().drop_guard();
        let this = Arc::clone(self);
        let opened = tokio::spawn(async move { this.open(req, caller).await })
            .await
            .map_err(|e| {
                Error::CreateWorkspace(std::io::Error::other(format!("the opening failed: {e}")))
            })?;
        if let Some(m) = &self.config.metrics {
            match &opened {
                Ok(info) => m.session_created(info.pooled, started.elapsed().as_secs_f64()),
                Err(e) => m.refused(failure::describe(e).reason),
            }
        }
        opened
    }

    /// The service's counters in Prometheus's text format, the gauges
    /// read now; `None` when nothing is measured.
    pub fn encode_metrics(&self) -> Option<String> {
        let m = self.config.metrics.as_ref()?;
        m.sessions_open.set(self.table().len() as i64);
        let ready = self.pool.ready()
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

    async fn open(
        &self,
        req: NewSession,
        caller: tokio_util::sync::CancellationToken,
    ) -> Result<Info, failure::Error> {
        if self.table().len() >= self.config.max_sessions {
            return Err(Error::TooMany {
                limit: self.config.max_sessions,
            }
            .into());
        }
        let limits = self
            .config
            .sandbox
            .limits(req.limits, req.workspace_path.is_some())?;
        check_env("env", &req.env)?;
        let policy = self.policy(req.rules.clone())?;
        let ttl = self.config.ttl(req.ttl)?;
        let default_timeout = self.config.sandbox.session_timeout(req.default_timeout)?;
        let cfg = &self.config.sandbox;
        let (image, pool) = match (&req.image, &req.environment) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidArgument {
                    field: "environment",
                    why: "give an image or an environment, not both".into(),
                }
                .into());
            }
            // An environment was built by someone the operator allowed to
            // build: its image needs no further allowance.
            (None, Some(name)) => (
                self.builds.resolve(name).await?.image,
                self.environment_pools.get(name),
            ),
            (image, None) => {
                // The default image's stable alias names the default image
                // itself (while the operator has not swapped the built-in
                // one out).
                let image = match image {
                    Some(i)
                        if *i == image::alias() && cfg.default_image == image::default_image() =>
                    {
                        cfg.default_image.clone()
                    }
                    Some(i) => i.clone(),
                    None => cfg.default_image.clone(),
                };
                if image != cfg.default_image && !cfg.allowed_images.contains(&image) {
                    let mut allowed = vec![cfg.default_image.clone()];
                    allowed.extend(cfg.allowed_images.iter().cloned());
                    return Err(Error::ImageNotAllowed { image, allowed }.into());
                }
                let pool = (image == cfg.default_image).then_some(&self.pool);
                (image, pool)
            }
        };
        let warm = match pool {
            Some(pool) if req.workspace_path.is_none() && limits == cfg.default_limits => {
                pool.take()
            }
            _ => None,
        };
        // A warm entry made before its environment was built again.
        let warm = match warm {
            Some(w) if w.sandbox.spec().image != image => {
                tokio::spawn(discard(w));
                None
            }
            w => w,
        };
        let pooled = warm.is_some();
        let Prepared {
            id,
            workspace,
            volume,
            sandbox,
            reserved,
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
        // The journal and the history, or nothing of the session stays.
        // A durable session's files were made with its warm entry, or now.
        let reserved = match (reserved, &self.keep) {
            (Some(r), _) => Some(r),
            (None, Some(keep)) => keep.reserve(&id).map(|r| (keep.clone(), r)).ok(),
            (None, None) => None,
        };
        let parts = async {
            let (journal, record) = match reserved {
                Some((_, super::records::Reserved { journal, record })) => (journal, Some(record)),
                None if self.keep.is_some() => {
                    return Err(Error::Record(std::io::Error::other(
                        "cannot make the session's record file",
                    )));
                }
                None => (
                    Journal::new(&id, self.journal_files()).map_err(Error::Journal)?,
                    None,
                ),
            };
            let history = history_of(&workspace, &id, &self.volumes, &sandbox, &self.config)
                .await
                .map_err(Error::CreateWorkspace)?;
            Ok::<_, Error>((journal, record, history))
        }
        .await;
        let (journal, record_file, history) = match parts {
            Ok(parts) => parts,
            Err(e) => {
                if let Some(keep) = &self.keep {
                    keep.release(&id);
                }
                discard(Prepared {
                    id,
                    workspace,
                    volume,
                    sandbox,
                    reserved: None,
                })
                .await;
                return Err(e.into());
            }
        };
        let owns_workspace = volume.owns_workspace();
        let notes = volume.note().map(str::to_string).into_iter().collect();
        let now = SystemTime::now();
        let token = format!("{SESSION_TOKEN_PREFIX}{}", crate::secret::random_hex());
        let token_hash = crate::secret::sha256(token.as_bytes());
        let session = Arc::new(Session {
            id,
            workspace,
            sandbox,
            policy,
            journal,
            history,
            config: Arc::clone(&self.config),
            env: req.env,
            sandbox_status: Mutex::new(None),
            owns_workspace,
            notes,
            volume: Mutex::new(Some(volume)),
            running: AtomicUsize::new(0),
            ttl,
            default_timeout,
            environment: req.environment,
            created: now,
            last_used: Mutex::new((Instant::now(), now)),
            token_hash,
        });
        // Kept before anyone learns of the session: a session a crash can
        // lose is never handed out.
        let kept = match record_file {
            Some(mut file) => super::records::write(&mut file, &Record::of(&session)),
            None => Ok(()),
        };
        if let Err(e) = kept {
            tracing::warn!(session = %session.id, error = %e, "cannot record the session");
            let _ = session.sandbox.close().await;
            remove_volume(&session).await;
            Journal::remove_files(&session.id, &self.journals);
            return Err(Error::Record(e).into());
        }
        // Checked again under the lock: other creates ran while we worked.
        let admitted = {
            let mut table = self.table();
            let admitted = table.len() < self.config.max_sessions && !caller.is_cancelled();
            if admitted {
                table.insert(session.id.clone(), Arc::clone(&session));
                self.token_table().insert(token_hash, session.id.clone());
            }
            admitted
        };
        if !admitted {
            let _ = session.sandbox.close().await;
            remove_volume(&session).await;
            self.forget(&session.id).await;
            if caller.is_cancelled() {
                return Err(Error::CallerGone.into());
            }
            return Err(Error::TooMany {
                limit: self.config.max_sessions,
            }
            .into());
        }
        let ensured = session.sandbox.ensure().await;
        if caller.is_cancelled() {
            tracing::info!(session = %session.id, "the caller gave up while the session opened; it is closed");
            self.abandon(&session.id);
            return Err(Error::CallerGone.into());
        }
        match ensured {
            Ok(_) => {}
            Err(
                e @ (sandbox::Error::ImageMissing { .. } | sandbox::Error::ImageUnusable { .. }),
            ) => {
                let _ = self.close_session(&session.id).await;
                return Err(e.into());
            }
            // The engine took the calls and did not answer: what it made
            // meanwhile is removed once it does.
            Err(e @ sandbox::Error::EngineTimeout) => {
                tracing::warn!(session = %session.id, error = %e, "the engine does not answer; the session is not opened");
                self.abandon(&session.id);
                return Err(Error::NotStarted(e).into());
            }
            Err(e) => {
                tracing::warn!(session = %session.id, error = %e, "session opened without a container");
                session.set_sandbox_status(Some(e.to_string()));
            }
        }
        let mut info = session.info().await;
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
        info.session_token = Some(token);
        info.pooled = pooled;
        Ok(info)
    }

    /// Drops a session that never opened: out of the table at once (it is
    /// not counted, its token admits nothing), its container, workspace
    /// and record removed in the background, where a hung engine can hold
    /// up nobody.
    fn abandon(&self, id: &str) {
        let Some(session) = self.table().remove(id) else {
            return;
        };
        self.token_table().remove(&session.token_hash);
        let (records, journals) = (self.records.clone(), self.journals.clone());
        let keep_journal = self.journal_dir.is_some();
        tokio::spawn(async move {
            let _ = session.sandbox.close().await;
            remove_volume(&session).await;
            let _ = records.remove(&session.id);
            if !keep_journal {
                Journal::remove_files(&session.id, &journals);
            }
        });
        self.remove_leftovers(id);
    }

    /// Removes, in the background and as soon as the engine answers, every
    /// container of session `id` (one the engine made after its caller gave
    /// up is known by its labels only).
    fn remove_leftovers(&self, id: &str) {
        let (runtime, id) = (Arc::clone(&self.runtime), id.to_string());
        tokio::spawn(async move {
            let mut pause = std::time::Duration::from_millis(500);
            loop {
                match runtime.remove_all_labelled(labels::SESSION, &id).await {
                    Ok(0) => return,
                    Ok(n) => {
                        tracing::info!(session = %id, removed = n, "removed what the engine made for a session that never opened");
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(session = %id, error = %e, "cannot reach the engine yet")
                    }
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(15));
            }
        });
    }

    /// Where a new session's journal is appended: to a file when the
    /// operator keeps journals or sessions are durable (a restart reads it
    /// back); in memory only otherwise.
    fn journal_files(&self) -> Option<&journal::Files> {
        (self.journal_dir.is_some() || self.config.durable).then_some(&self.journals)
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

    /// Brings back the sessions an earlier instance of this service left
    /// open (after a crash, a kill or a clean stop alike): each with its id,
    /// token, workspace, policy, journal and timeouts, its container made
    /// afresh on its next command. A session that cannot come back (its
    /// workspace is gone, or a lent directory is no longer the one it was
    /// lent) is logged and its record dropped; its workspace, if it holds
    /// anything, is then moved to the quarantine by the sweep, never
    /// deleted. Returns the ids brought back. Call before the sweep.
    pub async fn recover(&self) -> Vec<String> {
        let records = self.records.clone();
        let found = match tokio::task::spawn_blocking(move || records.load()).await {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot read the sessions' records");
                return Vec::new();
            }
            Err(e) => {
                tracing::error!(error = %e, "reading the sessions' records failed");
                return Vec::new();
            }
        };
        let mut back = Vec::new();
        for (id, record) in found {
            let record = match record {
                Ok(record) => record,
                Err(why) => {
                    tracing::error!(session = %id, why, "a session's record cannot be read; the session is not brought back (its workspace goes to the quarantine)");
                    let _ = self.records.remove(&id);
                    continue;
                }
            };
            if self.table().contains_key(&id) {
                continue;
            }
            match self.bring_back(record).await {
                Ok(session) => {
                    if let Some(m) = &self.config.metrics {
                        m.sessions_recovered.inc();
                    }
                    tracing::info!(session = %id, workspace = %session.workspace.host_path().display(), "session brought back");
                    back.push(id);
                }
                Err(e) => {
                    tracing::error!(session = %id, error = %e, "a session cannot be brought back (its workspace, if fresh and not empty, goes to the quarantine)");
                    let _ = self.records.remove(&id);
                }
            }
        }
        back
    }

    /// The operator's rules narrowed by a session's own.
    fn policy(&self, rules: crate::policy::Rules) -> Result<Arc<Policy>, Error> {
        Policy::new(&self.config.deny_writes, &self.config.sandbox.guard, rules)
            .map(Arc::new)
            .map_err(Error::InvalidPolicy)
    }

    async fn bring_back(&self, record: Record) -> Result<Arc<Session>, failure::Error> {
        let policy = self.policy(record.rules.clone())?;
        let token_hash: [u8; 32] = hex::decode(&record.token_sha256)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::InvalidArgument {
                field: "token_sha256",
                why: "the record's token hash is malformed".into(),
            })?;
        let lent = match &record.workspace {
            Place::Fresh => None,
            Place::Lent { path } => Some(path.display().to_string()),
        };
        let Prepared {
            id,
            workspace,
            volume,
            sandbox,
            reserved: _,
        } = reopen(
            &self.config,
            &self.runtime,
            &self.locks,
            &self.volumes,
            record.id.clone(),
            lent,
            Some(record.identity),
            record.image.clone(),
            record.limits,
        )
        .await?;
        let parts = async {
            let journals = self.journals.clone();
            let jid = id.clone();
            let (journal, found) =
                tokio::task::spawn_blocking(move || Journal::recover(&jid, &journals))
                    .await
                    .map_err(|e| Error::Journal(std::io::Error::other(e.to_string())))?
                    .map_err(Error::Journal)?;
            let history = match history_again(&workspace, &id, &self.volumes, &sandbox, &self.config).await {
                Ok(history) => history,
                Err(why) => {
                    // Changes since the start can no longer be told truly:
                    // they are refused, saying why, never told from now.
                    tracing::warn!(session = %id, why, "the session's history cannot be read back");
                    let history = history_of(&workspace, &id, &self.volumes, &sandbox, &self.config)
                        .await
                        .map_err(Error::CreateWorkspace)?;
                    history
                        .lose_baseline(format!(
                            "the service restarted, and the pictures of the workspace taken before it did cannot be read back ({why})"
                        ))
                        .await;
                    history
                }
            };
            Ok::<_, Error>((journal, found, history))
        }
        .await;
        let (journal, found, history) = match parts {
            Ok(parts) => parts,
            Err(e) => {
                // The volume stays for the quarantine: only the pin goes.
                drop(volume);
                return Err(e.into());
            }
        };
        let created = std::time::UNIX_EPOCH + std::time::Duration::from_millis(record.created_ms);
        let mut notes: Vec<String> = volume.note().map(str::to_string).into_iter().collect();
        notes.push(format!(
            "the service restarted; this session came back with its workspace and journal, and a fresh container on its next command{}",
            match found.interrupted {
                0 => String::new(),
                1 => " (1 command was running and is journaled as interrupted)".to_string(),
                n => format!(" ({n} commands were running and are journaled as interrupted)"),
            }
        ));
        let now = SystemTime::now();
        let session = Arc::new(Session {
            owns_workspace: volume.owns_workspace(),
            id,
            workspace,
            sandbox,
            policy,
            journal,
            history,
            config: Arc::clone(&self.config),
            env: record.env,
            sandbox_status: Mutex::new(None),
            notes,
            volume: Mutex::new(Some(volume)),
            running: AtomicUsize::new(0),
            ttl: std::time::Duration::from_millis(record.ttl_ms),
            default_timeout: std::time::Duration::from_millis(record.default_timeout_ms),
            environment: record.environment,
            created,
            // The idle clock starts again: nobody could call while the
            // service was down.
            last_used: Mutex::new((Instant::now(), now)),
            token_hash,
        });
        session.journal.ok(
            "RecoverSession",
            "",
            Instant::now(),
            format!(
                "brought back after a restart; {} entries read back, {} commands interrupted, {} lines unreadable",
                found.entries, found.interrupted, found.unreadable
            ),
        );
        self.table()
            .insert(session.id.clone(), Arc::clone(&session));
        self.token_table().insert(token_hash, session.id.clone());
        Ok(session)
    }

    /// An upload's turn among the service's upload slots: taken before its
    /// stream is read, so waiting uploads hold no memory and no thread.
    pub async fn upload_turn(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.config.upload_slots)
            .acquire_owned()
            .await
            .ok()
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

    /// The session `id`, if `caller` may use it, marked as used now. A
    /// session the caller may not use is not found, exactly as one that
    /// does not exist (whether it exists is not told).
    pub fn get(&self, caller: &Caller, id: &str) -> Result<Arc<Session>, Error> {
        let session = self
            .table()
            .get(id)
            .filter(|_| caller.may_use(id))
            .cloned()
            .ok_or_else(|| Error::NotFound { id: id.to_string() })?;
        session.touch();
        Ok(session)
    }

    /// Refuses a call that is not about one session to a session's token.
    pub fn admin_only(caller: &Caller, what: &'static str) -> Result<(), Error> {
        match caller {
            Caller::Admin => Ok(()),
            Caller::Session(_) => Err(Error::NotPermitted { what }),
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

    /// Closes `id` for `caller`: removes its container, and its workspace
    /// if the session owns it.
    pub async fn close(&self, caller: &Caller, id: &str) -> Result<Closed, Error> {
        if !caller.may_use(id) {
            return Err(Error::NotFound { id: id.to_string() });
        }
        self.close_session(id).await
    }

    async fn close_session(&self, id: &str) -> Result<Closed, Error> {
        let session = self
            .table()
            .remove(id)
            .ok_or_else(|| Error::NotFound { id: id.to_string() })?;
        self.token_table().remove(&session.token_hash);
        if let Err(e) = session.sandbox.close().await {
            tracing::warn!(session = %id, error = %e, "cannot remove the session's container");
        }
        let workspace_removed = remove_volume(&session).await;
        tracing::info!(session = %id, workspace_removed, "session closed");
        self.forget(id).await;
        let detail = if workspace_removed {
            "workspace removed"
        } else {
            "workspace left in place"
        };
        session
            .journal
            .ok("CloseSession", "", Instant::now(), detail.to_string());
        let mut report = session.journal.report(None, None);
        report.checkpoints = session.history.list().await;
        Ok(Closed {
            id: id.to_string(),
            workspace_removed,
            report,
        })
    }

    /// Removes what an earlier instance of this service leaked: containers
    /// labelled with our service name but another instance id, then the
    /// workspaces, pins and sockets no live session uses. Returns the
    /// number of containers removed.
    pub async fn sweep_leaked(&self) -> Result<usize, failure::Error> {
        let cfg = &self.config.sandbox;
        // Containers first: a volume is unmounted only once nothing uses it.
        // By state directory, not by name: this instance holds ours, so
        // whoever else made containers bearing it has died, and another
        // live instance (of any name) has a state directory of its own.
        let removed = self
            .runtime
            .remove_labelled(
                labels::STATE,
                &cfg.state_id,
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
        for pool in self.environment_pools.values() {
            live.extend(pool.ids());
        }
        let volumes = Arc::clone(&self.volumes);
        // Journals the service keeps for itself: an empty one no session
        // owns was made ahead for a warm entry that never opened. One with
        // entries is a session's that could not come back: it stays.
        let journals = self.journal_dir.is_none().then(|| self.journals.clone());
        let swept = tokio::task::spawn_blocking(move || {
            if let Some(files) = journals {
                for name in files.dir.names().unwrap_or_default() {
                    let id = name.split('.').next().unwrap_or_default();
                    let empty = files
                        .dir
                        .read(&name)
                        .ok()
                        .flatten()
                        .is_some_and(|b| b.is_empty());
                    if empty && !live.iter().any(|l| l == id) {
                        let _ = files.dir.remove_file(&name);
                    }
                }
            }
            volumes.sweep(&live)
        })
        .await;
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
            .filter(|s| s.running.load(Ordering::SeqCst) == 0)
            .filter(|s| s.idle_for(now) >= s.ttl)
            .map(|s| s.id.clone())
            .collect();
        let mut closed = Vec::new();
        for id in expired {
            if self.close_session(&id).await.is_ok() {
                tracing::info!(session = %id, "session expired");
                closed.push(id);
            }
        }
        closed
    }

    /// Tops the pools of warm containers up to their configured sizes, in
    /// the background. An environment's pool follows its latest build.
    pub fn fill_pool(&self) {
        let cfg = &self.config.sandbox;
        self.pool.fill(
            &self.config,
            &self.runtime,
            &self.locks,
            &self.volumes,
            &cfg.default_image,
            cfg.pool_size,
            self.keep.as_ref(),
        );
        for (name, pool) in &self.environment_pools {
            let want = cfg.environment_pools.get(name).copied().unwrap_or(0);
            let keep = self.keep.clone();
            let (name, pool, builds, config, runtime, locks, volumes) = (
                name.clone(),
                Arc::clone(pool),
                Arc::clone(&self.builds),
                Arc::clone(&self.config),
                Arc::clone(&self.runtime),
                Arc::clone(&self.locks),
                Arc::clone(&self.volumes),
            );
            tokio::spawn(async move {
                let env = match builds.resolve(&name).await {
                    Ok(env) => env,
                    Err(e) => {
                        tracing::debug!(environment = %name, error = %e, "cannot warm an environment");
                        return;
                    }
                };
                for stale in pool.stale(&env.image) {
                    discard(stale).await;
                }
                pool.fill(
                    &config,
                    &runtime,
                    &locks,
                    &volumes,
                    &env.image,
                    want,
                    keep.as_ref(),
                );
            });
        }
    }

    /// Warm containers of the default image ready now (for tests and the
    /// benchmark).
    pub fn pool_ready(&self) -> usize {
        self.pool.ready()
    }

    /// Warm containers of environment `name` ready now.
    pub fn environment_pool_ready(&self, name: &str) -> usize {
        self.environment_pools.get(name).map_or(0, |p| p.ready())
    }

    /// Starts building an environment (or joins the same build, or answers
    /// from the cache). `may_build`: the server vouches for the caller.
    pub async fn build_environment(
        &self,
        req: NewEnvironment,
        may_build: bool,
    ) -> Result<BuildEvents, failure::Error> {
        self.builds.build(req, may_build).await
    }

    /// Every environment, with the sessions running it.
    pub async fn list_environments(&self) -> Result<Vec<EnvironmentInfo>, failure::Error> {
        let environments = self.builds.list().await?;
        Ok(environments
            .into_iter()
            .map(|environment| EnvironmentInfo {
                sessions: self.sessions_of(&environment.name),
                environment,
            })
            .collect())
    }

    /// Deletes an environment no session runs (its warm entries go first).
    pub async fn delete_environment(
        &self,
        name: &str,
        may_build: bool,
    ) -> Result<Environment, failure::Error> {
        let sessions = self.sessions_of(name);
        // Warm containers of its image go first, and none is made while
        // its images are removed.
        let pool = self
            .environment_pools
            .get(name)
            .filter(|_| (may_build || self.config.allow_builds) && sessions.is_empty());
        if let Some(pool) = pool {
            pool.pause(true);
            pool.settled().await;
            for warm in pool.clear() {
                discard(warm).await;
            }
        }
        let deleted = self.builds.delete(name, may_build, sessions).await;
        if let Some(pool) = pool {
            pool.pause(false);
        }
        deleted
    }

    fn sessions_of(&self, environment: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .table()
            .values()
            .filter(|s| s.environment.as_deref() == Some(environment))
            .map(|s| s.id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Closes every session and empties the pools (at shutdown). When
    /// sessions are durable they are only put away: their containers go,
    /// their workspaces are let go of and kept with their records and
    /// journals for the next start.
    pub async fn close_all(&self) {
        let pools: Vec<&Arc<Pool>> = std::iter::once(&self.pool)
            .chain(self.environment_pools.values())
            .collect();
        for pool in &pools {
            for warm in pool.drain() {
                discard(warm).await;
            }
        }
        for pool in pools {
            pool.settled().await;
        }
        let ids: Vec<String> = self.table().keys().cloned().collect();
        if self.config.durable {
            let sessions: Vec<Arc<Session>> = self.table().drain().map(|(_, s)| s).collect();
            self.token_table().clear();
            for session in sessions {
                put_away(&session).await;
            }
            return;
        }
        for id in ids {
            let _ = self.close_session(&id).await;
        }
    }
}

/// The history of a new session: its contents kept in the volume's
/// history directory, within the session's disk quota (the default one
/// where the workspace has none).
async fn history_of(
    workspace: &crate::workspace::Workspace,
    id: &str,
    volumes: &Arc<Volumes>,
    sandbox: &sandbox::Sandbox,
    config: &Config,
) -> std::io::Result<History> {
    let budget = match sandbox.spec().limits.disk_bytes {
        0 => config.sandbox.default_limits.disk_bytes,
        quota => quota,
    };
    let (volumes, id) = (Arc::clone(volumes), id.to_string());
    let dir = tokio::task::spawn_blocking(move || volumes.history_dir(&id))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))??;
    let limits = HistoryLimits {
        max_checkpoints: config.history.max_checkpoints,
        max_memory: config.history.max_memory,
        scan: config.history.scan,
    };
    Ok(History::new(workspace.clone(), dir, budget, limits))
}

/// Puts a durable session away at shutdown: removes its container and
/// lets go of its workspace's mount, keeping the workspace.
async fn put_away(session: &Session) {
    if let Err(e) = session.sandbox.close().await {
        tracing::warn!(session = %session.id, error = %e, "cannot remove the session's container");
    }
    let volume = session
        .volume
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(volume) = volume {
        match tokio::task::spawn_blocking(move || volume.release()).await {
            Ok(Ok(())) => tracing::info!(session = %session.id, "session kept for the next start"),
            Ok(Err(e)) => {
                tracing::warn!(session = %session.id, error = %e, "cannot let go of the workspace's mount")
            }
            Err(e) => {
                tracing::warn!(session = %session.id, error = %e, "letting go of the workspace failed")
            }
        }
    }
}

/// The history a session that comes back after a restart had (see
/// [`History::reopen`]), or why it cannot be read back.
async fn history_again(
    workspace: &crate::workspace::Workspace,
    id: &str,
    volumes: &Arc<Volumes>,
    sandbox: &sandbox::Sandbox,
    config: &Config,
) -> Result<History, String> {
    let budget = match sandbox.spec().limits.disk_bytes {
        0 => config.sandbox.default_limits.disk_bytes,
        quota => quota,
    };
    let limits = HistoryLimits {
        max_checkpoints: config.history.max_checkpoints,
        max_memory: config.history.max_memory,
        scan: config.history.scan,
    };
    let (volumes, id, workspace) = (Arc::clone(volumes), id.to_string(), workspace.clone());
    tokio::task::spawn_blocking(move || {
        let dir = volumes.history_dir_again(&id).map_err(|e| e.to_string())?;
        History::reopen(workspace, dir, budget, limits)
    })
    .await
    .map_err(|e| e.to_string())?
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
