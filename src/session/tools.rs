//! One open session and its file tools. Every call is journaled: what was
//! asked, and either what it did or the very refusal the caller was told.
//! Commands are in `command`; opening and closing sessions in `registry`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use super::approvals::Approvals;
use super::approvals::{ApprovedPlan, Gated};
use super::config::Config;
use super::error::Error;
use super::failure::{self, describe};
use super::messages::{Info, Reset};
use crate::journal::Journal;
use crate::policy::Policy;
use crate::sandbox::Sandbox;
use crate::volume::Volume;
use crate::workspace::PatchedFile;
use crate::workspace::history::History;
use crate::workspace::{
    CreateOutput, EditOutput, EditSpec, FindOutput, ListOutput, ReadOutput, SearchOutput,
    SearchQuery, Workspace,
};

/// One open session.
#[derive(Debug)]
pub struct Session {
    /// Opaque id.
    pub id: String,
    /// The file tools over this session's workspace.
    pub workspace: Workspace,
    /// The session's container.
    pub sandbox: Sandbox,
    /// What the session may write and run (an approved plan changes it;
    /// read it with [`Session::policy`]).
    pub(super) policy: RwLock<Arc<Policy>>,
    /// Every call, for audit.
    pub journal: Journal,
    /// Where the session began, and its checkpoints.
    pub(super) history: History,
    /// The operator's settings (defaults and ceilings of its commands).
    pub(super) config: Arc<Config>,
    /// Environment of every command of the session (over the container's).
    pub(super) env: BTreeMap<String, String>,
    pub(super) sandbox_status: Mutex<Option<String>>,
    /// The workspace as containers mount it; taken at close.
    pub(super) volume: Mutex<Option<Volume>>,
    pub(super) owns_workspace: bool,
    /// What callers must know about the session (from its volume).
    pub(super) notes: Vec<String>,
    /// Commands running now: a session with one is never idle.
    pub(super) running: AtomicUsize,
    /// Readers of its processes' output now: a session with one is never
    /// idle either.
    pub(super) readers: super::readers::Readers,
    /// Its budget of replies not yet taken by its caller.
    pub(super) replies: super::replies::Replies,
    /// Its long-running processes.
    pub(super) processes: super::process_table::Processes,
    /// Its commands as viewers see them.
    pub watch: super::watch::Watch,
    pub(super) ttl: Duration,
    /// Timeout of its commands that give none.
    pub(super) default_timeout: Duration,
    /// The environment its image was built as.
    pub(super) environment: Option<String>,
    pub(super) created: SystemTime,
    pub(super) last_used: Mutex<(Instant, SystemTime)>,
    /// The sha256 of the session's token (the token itself is never kept).
    pub(super) token_hash: [u8; 32],
    /// Nobody watches it: nothing of it waits for a person.
    pub(super) unattended: bool,
    /// The plan approved last.
    pub(super) plan: Mutex<Option<ApprovedPlan>>,
    /// Where its calls wait for a person.
    pub(super) approvals: Arc<Approvals>,
    /// Where its record is kept, to keep an approved plan (durable
    /// services only).
    pub(super) records: Option<Arc<crate::state::StateDir>>,
}

/// Said of a process a reset of its sandbox ended.
pub(super) const NOTE_RESET: &str =
    "it ended with its sandbox: ResetSandbox killed the container and every process in it";
/// Said of a process its session's close ended.
pub(super) const NOTE_CLOSED: &str = "it ended with its session, which was closed";

/// Edits as a person approving them reads them: each edit's old text as
/// `-` lines and its new text as `+` lines.
fn edits_shown(edits: &[EditSpec]) -> String {
    let mut shown = String::new();
    for (i, e) in edits.iter().enumerate() {
        shown.push_str(&format!(
            "@@ edit {}{}\n",
            i + 1,
            if e.replace_all {
                " (every occurrence)"
            } else {
                ""
            }
        ));
        for line in e.old.lines() {
            shown.push_str(&format!("-{line}\n"));
        }
        for line in e.new.lines() {
            shown.push_str(&format!("+{line}\n"));
        }
        if shown.len() > 4 * super::approvals::CHANGE_CHARS {
            break;
        }
    }
    shown
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
            default_timeout: self.default_timeout,
            created: self.created,
            last_used,
            image: self.sandbox.spec().image.clone(),
            environment: self.environment.clone(),
            container_id: self.sandbox.container_id().await,
            limits: self.sandbox.spec().limits,
            sandbox_status: self
                .sandbox_status
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            rules: self.policy().rules().clone(),
            notes: self.notes.clone(),
            unattended: self.unattended,
            plan: self.approved_plan(),
            session_token: None,
            pooled: false,
        }
    }

    /// Commands running now.
    pub fn commands_running(&self) -> usize {
        self.running.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// GetSession: a snapshot, journaled.
    pub async fn get_info(&self) -> Info {
        let started = Instant::now();
        let info = self.info().await;
        self.journal.ok("GetSession", "", started, String::new());
        info
    }

    /// Records the outcome of a call that writes nothing.
    pub(super) fn journaled<T>(
        &self,
        tool: &'static str,
        summary: &str,
        started: Instant,
        result: Result<T, failure::Error>,
        detail: impl FnOnce(&T) -> String,
    ) -> Result<T, failure::Error> {
        match &result {
            Ok(out) => self.journal.ok(tool, summary, started, detail(out)),
            Err(e) => self.refused(tool, summary, started, e),
        }
        result
    }

    /// Journals a refusal in the very words the caller is told.
    pub(super) fn refused(
        &self,
        tool: &'static str,
        summary: &str,
        started: Instant,
        e: &failure::Error,
    ) {
        let told = describe(e);
        if let Some(m) = &self.config.metrics {
            m.refused(told.reason);
            if tool == "RunCommand" {
                m.command("refused");
            }
        }
        self.journal
            .refused(tool, summary, started, told.reason, told.message);
    }

    /// ResetSandbox: kills the container (and everything left running in
    /// it) and starts a fresh one over the same workspace.
    pub async fn reset_sandbox(&self) -> Result<Reset, failure::Error> {
        let started = Instant::now();
        let result = match self.policy().check_mutation("ResetSandbox") {
            Ok(()) => {
                self.processes.ending_with_sandbox(NOTE_RESET);
                self.sandbox.reset(true).await.map_err(Into::into)
            }
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

    /// ReadFile, with the reply's reservation of the session's budget of
    /// unread replies (see `replies`): hold it until the reply is sent or
    /// dropped. A read that finds the budget spent does not hold its
    /// content while it waits: it reads again once it has its share.
    pub async fn read_file_reply(
        &self,
        path: &str,
        offset: u64,
        limit: u64,
    ) -> Result<(ReadOutput, super::ReplyBytes), failure::Error> {
        let mut out = self.read_file(path, offset, limit).await?;
        loop {
            if let Some(held) = self.replies.try_reserve(out.content.len()) {
                return Ok((out, held));
            }
            let bytes = out.content.len();
            drop(out);
            let held = self.replies.reserve(bytes).await?;
            out = self.read_file(path, offset, limit).await?;
            // The file may have grown meanwhile: what is returned must fit
            // what was reserved, or the budget would bound nothing.
            if out.content.len() <= bytes {
                return Ok((out, held));
            }
        }
    }

    /// ReadFile.
    pub async fn read_file(
        &self,
        path: &str,
        offset: u64,
        limit: u64,
    ) -> Result<ReadOutput, failure::Error> {
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
        result: Result<Gated<T>, failure::Error>,
        landed: impl FnOnce(&T) -> (String, Option<String>, String),
    ) -> Result<Gated<T>, failure::Error> {
        match &result {
            Ok(Gated::Done(out)) => {
                let (path, before, after) = landed(out);
                self.journal
                    .wrote(tool, summary, started, path, before, after);
            }
            Ok(Gated::Rejected(r)) => self.journal_rejected(tool, summary, started, r),
            Err(e) => self.refused(tool, summary, started, e),
        }
        result
    }

    /// CreateFile, within the session's policy.
    pub async fn create_file(
        &self,
        path: &str,
        content: String,
    ) -> Result<Gated<CreateOutput>, failure::Error> {
        let started = Instant::now();
        let summary = format!("{path:?} ({} bytes)", content.len());
        // Copied only for a second attempt, which only an ask rule makes.
        let asks = self.policy().asks();
        let shown = asks.then(|| {
            crate::text::cut(&content, super::approvals::CHANGE_CHARS)
                .0
                .to_string()
        });
        let mut content = Some(content);
        let result = self
            .gated_write(
                &summary,
                || shown.clone().unwrap_or_default(),
                |policy| {
                    let content = if asks {
                        content.clone()
                    } else {
                        content.take()
                    };
                    async move {
                        policy
                            .check_mutation("CreateFile")
                            .map_err(crate::workspace::Error::Denied)?;
                        self.history.begin().await;
                        let _turn = self.history.write_turn().await;
                        let content = content.unwrap_or_default();
                        Ok(self.workspace.create(path, content, &policy).await?)
                    }
                },
            )
            .await;
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
    ) -> Result<Gated<EditOutput>, failure::Error> {
        let started = Instant::now();
        let summary = format!("{path:?} ({})", plural_edits(edits.len()));
        let result = self
            .gated_write(
                &summary,
                || edits_shown(&edits),
                |policy| {
                    let (edits, expected_sha256) = (edits.clone(), expected_sha256.clone());
                    async move {
                        policy
                            .check_mutation("EditFile")
                            .map_err(crate::workspace::Error::Denied)?;
                        self.history.begin().await;
                        let _turn = self.history.write_turn().await;
                        Ok(self
                            .workspace
                            .edit(path, edits, expected_sha256, &policy)
                            .await?)
                    }
                },
            )
            .await;
        self.journaled_write("EditFile", &summary, started, result, |o| {
            (
                o.landed.clone(),
                Some(o.sha256_before.clone()),
                o.sha256.clone(),
            )
        })
    }

    /// ApplyPatch, within the session's policy: one journal entry per file.
    pub async fn apply_patch(&self, text: &str) -> Result<Gated<Vec<PatchedFile>>, failure::Error> {
        let started = Instant::now();
        let summary = format!("{} bytes", text.len());
        let result = self
            .gated_write(
                &summary,
                || text.to_string(),
                |policy| async move {
                    policy
                        .check_mutation("ApplyPatch")
                        .map_err(crate::workspace::Error::Denied)?;
                    self.history.begin().await;
                    let _turn = self.history.write_turn().await;
                    Ok(self.workspace.apply_patch(text, &policy).await?)
                },
            )
            .await;
        match result {
            Ok(Gated::Done(files)) => {
                for f in &files {
                    let summary = format!("{summary}: {:?} {}", f.action, f.path);
                    self.journal.wrote(
                        "ApplyPatch",
                        &summary,
                        started,
                        f.path.clone(),
                        f.sha256_before.clone(),
                        f.sha256_after.clone().unwrap_or_default(),
                    );
                }
                Ok(Gated::Done(files))
            }
            Ok(Gated::Rejected(r)) => {
                self.journal_rejected("ApplyPatch", &summary, started, &r);
                Ok(Gated::Rejected(r))
            }
            Err(e) => {
                self.refused("ApplyPatch", &summary, started, &e);
                Err(e)
            }
        }
    }

    /// ListDir.
    pub async fn list_dir(&self, path: &str) -> Result<ListOutput, failure::Error> {
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
    ) -> Result<FindOutput, failure::Error> {
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
    pub async fn search(&self, query: SearchQuery) -> Result<SearchOutput, failure::Error> {
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

    pub(super) fn set_sandbox_status(&self, status: Option<String>) {
        *self
            .sandbox_status
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = status;
    }

    pub(super) fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) =
            (Instant::now(), SystemTime::now());
    }

    pub(super) fn idle_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_used.lock().unwrap_or_else(|e| e.into_inner()).0)
    }
}
