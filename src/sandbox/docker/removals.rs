//! Containers the engine failed to remove: kept in a list and removal
//! retried, with growing pauses, until the engine removes them; never
//! forgotten (the next start over the same state directory removes what a
//! stop could not).

use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::RemoveContainerOptionsBuilder;

use super::{DockerRuntime, classify, connect, is_status};
use crate::sandbox::Error;

/// Longest pause between two tries at removing a container.
const RETRY_MAX_PAUSE: Duration = Duration::from_secs(15);

impl DockerRuntime {
    /// Keeps trying to remove `id` until the engine does (in the
    /// background, pausing longer after each failure).
    pub(super) fn doom(&self, id: &str) {
        self.doomed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string());
        if self
            .retrying
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let (doomed, retrying) = (Arc::clone(&self.doomed), Arc::clone(&self.retrying));
        let (cell, host, timeout) = (Arc::clone(&self.client), self.host.clone(), self.timeout);
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(500);
            loop {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX_PAUSE);
                let Ok(docker) = cell
                    .get_or_try_init(|| connect(host.as_deref(), timeout))
                    .await
                else {
                    continue;
                };
                let ids: Vec<String> = doomed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .cloned()
                    .collect();
                for id in ids {
                    if remove(docker, &id).await.is_ok() {
                        tracing::info!(container = %id, "a container the engine had failed to remove is removed");
                        doomed.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                    }
                }
                let left = doomed.lock().unwrap_or_else(|e| e.into_inner());
                if left.is_empty() {
                    retrying.store(false, std::sync::atomic::Ordering::Release);
                    return;
                }
                tracing::warn!(containers = ?*left, "the engine still fails to remove these containers; retrying");
            }
        });
    }

    /// Tries once more, within `wait`, to remove every container a removal
    /// failed for (at shutdown); returns those still there, which the next
    /// start over the same state directory removes.
    pub async fn finish_removals(&self, wait: Duration) -> Vec<String> {
        let ids: Vec<String> = self
            .doomed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect();
        let Some(docker) = self.client.get() else {
            return ids;
        };
        let mut left = Vec::new();
        for id in ids {
            match tokio::time::timeout(wait, remove(docker, &id)).await {
                Ok(Ok(())) => {
                    self.doomed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&id);
                }
                _ => left.push(id),
            }
        }
        left
    }
}

/// Removes container `id` (force, with its anonymous volumes); a missing
/// one, or one being removed already, is done.
pub(super) async fn remove(docker: &Docker, id: &str) -> Result<(), Error> {
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_status(&e, &[404, 409]) => Ok(()),
        Err(e) => Err(classify(Error::RemoveContainer, e)),
    }
}
