//! Opening a session: the caller's request checked against the operator's
//! settings, a warm entry taken or a session-to-be prepared, its journal,
//! history and record made, and the session admitted to the table only
//! once nothing of it can be lost. A caller that gives up leaves nothing
//! behind.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use super::close::remove_volume;
use super::{Registry, SESSION_TOKEN_PREFIX};
use crate::journal::{self, Journal};
use crate::sandbox::{self, image, labels};
use crate::session::config::Config;
use crate::session::error::Error;
use crate::session::failure;
use crate::session::lend::{NotLent, check, lend, lent_limits};
use crate::session::messages::{Info, NewSession, check_env};
use crate::session::prepare::{Prepared, discard, prepare};
use crate::session::records::Record;
use crate::session::tools::Session;
use crate::volume::Volumes;
use crate::workspace::history::{History, HistoryLimits};

/// How long a refill of the warm pool waits after a session took an entry.
const REFILL_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

impl Registry {
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
        req.rules.check_asked().map_err(Error::InvalidPolicy)?;
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
        // A session over an existing directory takes a warm container of
        // the default image from the pool for lent directories, which is
        // lent the directory below.
        let (pool, want) = match (&req.workspace_path, pool) {
            (Some(_), Some(_))
                if req.environment.is_none() && limits == lent_limits(&self.config)? =>
            {
                (Some(&self.lent_pool), self.lent_pool_size())
            }
            (Some(_), _) => (None, 0),
            (None, Some(pool)) if limits == cfg.default_limits => (
                Some(pool),
                match &req.environment {
                    Some(name) => cfg.environment_pools.get(name).copied().unwrap_or(0),
                    None => cfg.pool_size,
                },
            ),
            (None, _) => (None, 0),
        };
        // A directory that may not be lent is refused before any warm
        // container is spent on it.
        let checked = match (&req.workspace_path, pool) {
            (Some(path), Some(pool)) if pool.ready() > 0 => {
                Some(check(&self.config, &self.locks, &self.volumes, path.clone()).await?)
            }
            _ => None,
        };
        let warm = match (&req.workspace_path, &checked) {
            (Some(_), None) => None,
            _ => pool.and_then(|p| p.take()),
        };
        let refill = pool.map(|p| (Arc::clone(p), image.clone(), want));
        // A warm entry made before its environment was built again.
        let warm = match warm {
            Some(w) if w.sandbox.spec().image != image => {
                tokio::spawn(discard(w));
                None
            }
            w => w,
        };
        let took = warm.is_some();
        let warm = match (warm, checked) {
            (Some(warm), Some(checked)) => match lend(&self.volumes, warm, checked).await {
                Ok(lent) => Some(lent),
                Err(NotLent::Failed) => None,
                Err(NotLent::NotSeen) => {
                    self.stop_lending();
                    None
                }
            },
            (warm, _) => warm,
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
        let Some(workspace) = workspace else {
            // Only an entry not yet lent lacks one, and it was lent above.
            discard(Prepared {
                id,
                workspace: None,
                volume,
                sandbox,
                reserved,
            })
            .await;
            return Err(Error::CreateWorkspace(std::io::Error::other(
                "the warm container was not lent the directory",
            ))
            .into());
        };
        // The entry taken is made again once the new session's first
        // command, which its caller sends as soon as it has the answer,
        // has had the processors to itself: a container start beside it
        // would cost it half its speed on a small host.
        if took && let Some((pool, image, want)) = refill {
            self.refill_after(&pool, &image, want, REFILL_PAUSE);
        }
        crate::profile::mark("host: workspace opened");
        // The journal and the history, or nothing of the session stays.
        // A durable session's files were made with its warm entry, or now.
        let reserved = match (reserved, &self.keep) {
            (Some(r), _) => Some(r),
            (None, Some(keep)) => keep.reserve(&id).map(|r| (keep.clone(), r)).ok(),
            (None, None) => None,
        };
        let parts = async {
            let (journal, record) = match reserved {
                Some((_, crate::session::records::Reserved { journal, record })) => {
                    (journal, Some(record))
                }
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
            // A fresh workspace starts empty: its starting point is taken
            // now, off the first command's path, and stands while it stays
            // empty (see `history::early`).
            if volume.owns_workspace() {
                history.take_early().await;
            }
            Ok::<_, Error>((journal, record, history))
        };
        // A warm container's first spawn was long ago: what a spawn looks
        // up (the shell, its loader and libraries, through a filesystem
        // whose caches expire) is looked up again now, beside the host's
        // work, rather than in the caller's first command.
        let (parts, ()) = tokio::join!(parts, async {
            if pooled {
                sandbox.warm_up().await;
            }
        });
        let (journal, record_file, history) = match parts {
            Ok(parts) => parts,
            Err(e) => {
                if let Some(keep) = &self.keep {
                    keep.release(&id);
                }
                discard(Prepared {
                    id,
                    workspace: Some(workspace),
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
            policy: std::sync::RwLock::new(policy),
            journal,
            history,
            config: Arc::clone(&self.config),
            env: req.env,
            sandbox_status: Mutex::new(None),
            owns_workspace,
            notes,
            volume: Mutex::new(Some(volume)),
            running: AtomicUsize::new(0),
            readers: Default::default(),
            replies: Default::default(),
            processes: Default::default(),
            watch: Default::default(),
            ttl,
            default_timeout,
            environment: req.environment,
            created: now,
            last_used: Mutex::new((Instant::now(), now)),
            token_hash,
            unattended: req.unattended,
            plan: Mutex::new(None),
            approvals: Arc::clone(&self.approvals),
            records: self.keep.as_ref().map(|_| self.records.dir()),
        });
        // Kept before anyone learns of the session: a session a crash can
        // lose is never handed out.
        let kept = match record_file {
            Some(mut file) => crate::session::records::write(&mut file, &Record::of(&session)),
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
        crate::profile::mark("host: session recorded and admitted");
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
            "workspace {}, image {}, {}",
            info.workspace_path.display(),
            info.image,
            session.policy().preset()
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
}

/// The history of a new session: its contents kept in the volume's
/// history directory, within the session's disk quota (the default one
/// where the workspace has none).
pub(super) async fn history_of(
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
    let (volumes, id, ws) = (Arc::clone(volumes), id.to_string(), workspace.clone());
    let dir = tokio::task::spawn_blocking(move || {
        let dir = volumes.history_dir(&id)?;
        // Landings (uploads, patches, restores) are recorded beside the
        // history, out of every command's reach.
        ws.record_landings_in(dir.try_clone()?);
        Ok::<_, std::io::Error>(dir)
    })
    .await
    .map_err(|e| std::io::Error::other(e.to_string()))??;
    let limits = HistoryLimits {
        max_checkpoints: config.history.max_checkpoints,
        max_memory: config.history.max_memory,
        scan: config.history.scan,
    };
    Ok(History::new(workspace.clone(), dir, budget, limits))
}
