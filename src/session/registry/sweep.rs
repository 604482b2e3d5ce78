//! Sweeping what an earlier instance of the service leaked: its
//! containers, and the workspaces, pins, sockets and empty journals no
//! live or pooled session uses.

use std::sync::Arc;

use super::Registry;
use crate::sandbox::labels;
use crate::session::failure;

impl Registry {
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
        live.extend(self.lent_pool.ids());
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
}
