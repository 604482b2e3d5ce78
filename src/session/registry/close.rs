//! Closing sessions: on request, on idle timeout and at shutdown.
//!
//! A close answers once nothing of the session runs any more (every
//! process of its container killed, from the host where it can) and the
//! removal of what it leaves is certain: its record is gone, so it never
//! comes back, and its volume is marked closed. The removal itself (the
//! container through the engine, the workspace and its history) goes on
//! after the answer, retried until done; a service that stops first waits
//! for it a while, and whatever is left the next start's sweep removes
//! (never quarantines: see [`crate::volume::Volume::mark_closed`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Registry;
use crate::session::error::Error;
use crate::session::messages::{Caller, Closed};
use crate::session::pool::Pool;
use crate::session::prepare::discard;
use crate::session::tools::Session;
use crate::volume::Volume;

/// How long shutdown waits for closed sessions' removals.
const TEARDOWNS_WITHIN: Duration = Duration::from_secs(30);
/// The longest pause between two tries at removing a closed session's
/// workspace.
const RETRY_AT_MOST: Duration = Duration::from_secs(30);

/// Closed sessions whose container is still being removed, with the
/// environment each ran: an environment is deleted only once they are gone.
#[derive(Debug, Default)]
pub(super) struct Closing(Mutex<HashMap<String, Option<String>>>);

impl Closing {
    fn add(&self, id: &str, environment: Option<String>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), environment);
    }

    fn remove(&self, id: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }

    /// Waits (bounded) until no closed session of `environment` still has
    /// a container.
    pub(super) async fn settled(&self, environment: &str) {
        let until = Instant::now() + TEARDOWNS_WITHIN;
        let busy = || {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .any(|e| e.as_deref() == Some(environment))
        };
        while busy() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Registry {
    /// Closes `id` for `caller`: ends everything running in its container
    /// and answers; the container, and the workspace if the session owns
    /// it, are removed right after.
    pub async fn close(&self, caller: &Caller, id: &str) -> Result<Closed, Error> {
        if !caller.may_use(id) {
            return Err(Error::NotFound { id: id.to_string() });
        }
        self.close_session(id).await
    }

    pub(super) async fn close_session(&self, id: &str) -> Result<Closed, Error> {
        let session = self
            .table()
            .remove(id)
            .ok_or_else(|| Error::NotFound { id: id.to_string() })?;
        self.token_table().remove(&session.token_hash);
        self.approvals.withdraw_session(id);
        session
            .processes
            .ending_with_sandbox(crate::session::tools::NOTE_CLOSED);
        // Nothing of the session runs past the answer: a lent directory is
        // left as its last command left it.
        if let Err(e) = session.sandbox.halt().await {
            tracing::warn!(session = %id, error = %e, "cannot stop the session's container; removing it first");
            if let Err(e) = session.sandbox.close().await {
                tracing::warn!(session = %id, error = %e, "cannot remove the session's container");
            }
        }
        let volume = session
            .volume
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let workspace_removed = volume.as_ref().is_some_and(Volume::owns_workspace);
        if let Some(v) = &volume
            && let Err(e) = v.mark_closed()
        {
            // Removed all the same below; only a stop before then would
            // leave it to the quarantine.
            tracing::warn!(session = %id, error = %e, "cannot mark the workspace closed");
        }
        // A lent directory is the user's own: whatever of it is mounted
        // (a pin of a container start still in flight) is taken off the
        // host before the answer, not after.
        // (Detached unmounts, which never wait for the disk.)
        if let Some(v) = volume.as_ref().filter(|v| !v.owns_workspace())
            && let Err(e) = v.release()
        {
            tracing::warn!(session = %id, error = %e, "cannot unmount the lent directory's pin; its removal tries again");
        }
        self.forget(id).await;
        tracing::info!(session = %id, workspace_removed, "session closed");
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
        self.closing.add(id, session.environment.clone());
        self.teardowns
            .spawn(tear_down(Arc::clone(&self.closing), session, volume));
        Ok(Closed {
            id: id.to_string(),
            workspace_removed,
            report,
        })
    }

    /// Closes every session idle past its TTL; returns their ids.
    pub async fn reap_expired(&self) -> Vec<String> {
        let now = Instant::now();
        // A running command is activity: its session waits for it to end.
        // So is a call waiting for a person (which ends by its timeout).
        let expired: Vec<String> = self
            .table()
            .values()
            .filter(|s| s.running.load(Ordering::SeqCst) == 0 && s.readers.active() == 0)
            .filter(|s| !self.approvals.waits_for(&s.id))
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

    /// Closes every session and empties the pools (at shutdown). When
    /// sessions are durable they are only put away: their containers go,
    /// their workspaces are let go of and kept with their records and
    /// journals for the next start.
    pub async fn close_all(&self) {
        let pools: Vec<&Arc<Pool>> = [&self.pool, &self.lent_pool]
            .into_iter()
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
        } else {
            for id in ids {
                let _ = self.close_session(&id).await;
            }
        }
        // Sessions closed just before the stop are still being torn down:
        // their workspaces are unmounted before the service exits.
        self.teardowns.close();
        if tokio::time::timeout(TEARDOWNS_WITHIN, self.teardowns.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "closed sessions' containers and workspaces are still being removed; the next start finishes"
            );
        }
    }
}

/// Removes what a closed session leaves: its container (the engine keeps
/// trying a removal that fails), then its volume, tried again with growing
/// pauses until it is gone.
async fn tear_down(closing: Arc<Closing>, session: Arc<Session>, volume: Option<Volume>) {
    if let Err(e) = session.sandbox.close().await {
        tracing::warn!(session = %session.id, error = %e, "cannot remove the session's container");
    }
    closing.remove(&session.id);
    let Some(volume) = volume else { return };
    let volume = Arc::new(volume);
    let mut pause = Duration::from_millis(100);
    loop {
        let v = Arc::clone(&volume);
        match tokio::task::spawn_blocking(move || v.remove()).await {
            Ok(Ok(())) => break,
            Ok(Err(e)) => {
                tracing::warn!(session = %session.id, error = %e, "cannot remove the workspace volume; trying again")
            }
            Err(e) => {
                tracing::warn!(session = %session.id, error = %e, "workspace removal task failed; trying again")
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_AT_MOST);
    }
    tracing::debug!(session = %session.id, "the closed session's container and workspace are removed");
}

/// Puts a durable session away at shutdown: removes its container and
/// lets go of its workspace's mount, keeping the workspace.
async fn put_away(session: &Session) {
    // Its processes go with the container; the service that comes back
    // lists them as interrupted, as after a crash.
    session.journal.interrupt_processes();
    session
        .processes
        .ending_with_sandbox(crate::journal::NOTE_INTERRUPTED);
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

/// Unmounts the session's volume (removing its workspace if the session
/// owns it), now: for a session that never opened. True when a workspace
/// was removed.
pub(super) async fn remove_volume(session: &Session) -> bool {
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
