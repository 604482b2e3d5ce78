//! Bringing back, at start, the sessions an earlier instance of the
//! service left open: each from its record, with its token, workspace,
//! policy, journal and history; a session that cannot come back is logged
//! and its record dropped (its workspace goes to the quarantine).

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use super::Registry;
use super::open::history_of;
use crate::journal::Journal;
use crate::sandbox;
use crate::session::config::Config;
use crate::session::error::Error;
use crate::session::failure;
use crate::session::prepare::{Again, Prepared, reopen};
use crate::session::records::{Place, Record};
use crate::session::tools::Session;
use crate::volume::Volumes;
use crate::workspace::history::{History, HistoryLimits};
use crate::workspace::tree::intent::{Finished, Outcome};

impl Registry {
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

    async fn bring_back(&self, record: Record) -> Result<Arc<Session>, failure::Error> {
        let policy = self.policy(record.rules.clone())?;
        let token_hash: [u8; 32] = hex::decode(&record.token_sha256)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::InvalidArgument {
                field: "token_sha256",
                why: "the record's token hash is malformed".into(),
            })?;
        let (lent, handle) = match &record.workspace {
            Place::Fresh => (None, None),
            Place::Lent { path, handle } => (Some(path.display().to_string()), handle.clone()),
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
            Some(Again {
                identity: record.identity,
                handle,
            }),
            record.image.clone(),
            record.limits,
        )
        .await?;
        let workspace = workspace.ok_or_else(|| {
            Error::CreateWorkspace(std::io::Error::other("the workspace was not opened"))
        })?;
        let parts = async {
            let journals = self.journals.clone();
            let jid = id.clone();
            let (journal, found) =
                tokio::task::spawn_blocking(move || Journal::recover(&jid, &journals))
                    .await
                    .map_err(|e| Error::Journal(std::io::Error::other(e.to_string())))?
                    .map_err(Error::Journal)?;
            let (landings, history) = history_again(&workspace, &id, &self.volumes, &sandbox, &self.config).await;
            let history = match history {
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
            Ok::<_, Error>((journal, found, history, landings))
        }
        .await;
        let (journal, found, history, landings) = match parts {
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
            policy: std::sync::RwLock::new(policy),
            journal,
            history,
            config: Arc::clone(&self.config),
            env: record.env,
            sandbox_status: Mutex::new(None),
            notes,
            volume: Mutex::new(Some(volume)),
            running: AtomicUsize::new(0),
            readers: Default::default(),
            replies: Default::default(),
            processes: Default::default(),
            watch: Default::default(),
            ttl: std::time::Duration::from_millis(record.ttl_ms),
            default_timeout: std::time::Duration::from_millis(record.default_timeout_ms),
            environment: record.environment,
            created,
            // The idle clock starts again: nobody could call while the
            // service was down.
            last_used: Mutex::new((Instant::now(), now)),
            token_hash,
            unattended: record.unattended,
            plan: Mutex::new(record.plan),
            approvals: Arc::clone(&self.approvals),
            records: self.keep.as_ref().map(|_| self.records.dir()),
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
        for finished in &landings {
            journal_landing(&session.journal, finished);
        }
        self.table()
            .insert(session.id.clone(), Arc::clone(&session));
        self.token_table().insert(token_hash, session.id.clone());
        Ok(session)
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
) -> (Vec<Finished>, Result<History, String>) {
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
        let dir = match volumes.history_dir_again(&id) {
            Ok(dir) => dir,
            Err(e) => return (Vec::new(), Err(e.to_string())),
        };
        // Before anything reads the workspace: what a crash cut short is
        // finished, or undone.
        let finished = match dir.try_clone().and_then(|d| workspace.finish_landings(d)) {
            Ok(finished) => finished,
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "cannot read the session's landing records");
                Vec::new()
            }
        };
        let landings = dir.try_clone();
        let history = History::reopen(workspace.clone(), dir, budget, limits);
        match (history, landings) {
            (Ok(history), Ok(landings)) => {
                workspace.record_landings_in(landings);
                (finished, Ok(history))
            }
            (Ok(_), Err(e)) => (finished, Err(e.to_string())),
            (Err(why), _) => (finished, Err(why)),
        }
    })
    .await
    .unwrap_or_else(|e| (Vec::new(), Err(e.to_string())))
}

/// Journals what became of a landing a crash cut short.
fn journal_landing(journal: &Journal, finished: &Finished) {
    let tool = match finished.what.as_str() {
        "upload" => "UploadArchive",
        "patch" => "ApplyPatch",
        "restore" => "RestoreCheckpoint",
        _ => "Landing",
    };
    let summary = "cut short by a restart of the service";
    let now = Instant::now();
    match &finished.outcome {
        Outcome::Dropped => journal.ok(
            tool,
            summary,
            now,
            "it was still staging: nothing had changed, and its staging directory was removed"
                .into(),
        ),
        Outcome::Completed { steps } => journal.changed_tree(
            tool,
            summary,
            now,
            format!("finished at the start: the {steps} steps of its landing are all taken"),
        ),
        Outcome::Undone { why, left_in } => journal.changed_tree(
            tool,
            summary,
            now,
            format!(
                "it could not be finished ({why}), so the steps it had taken were undone{}",
                match left_in {
                    Some(dir) => format!("; what could not be put back is in {dir}"),
                    None => String::new(),
                }
            ),
        ),
        Outcome::Unreadable(why) => journal.ok(
            tool,
            summary,
            now,
            format!("its record could not be read ({why}); nothing was done"),
        ),
    }
}
