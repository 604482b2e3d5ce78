//! Per-file write queues: writes to one real path run one at a time (a
//! read-modify-write never loses a concurrent update), while writes to
//! different files never wait for each other. Entries vanish with their last
//! holder, so the table stays as small as the set of files being written.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// The table of queues, shared by every workspace of the service so that two
/// sessions over the same host directory also serialise.
#[derive(Debug, Default)]
pub struct PathLocks {
    table: Mutex<HashMap<PathBuf, Arc<AsyncMutex<()>>>>,
}

/// Holds a path's queue until dropped.
#[derive(Debug)]
pub struct PathGuard {
    locks: Arc<PathLocks>,
    key: PathBuf,
    guard: Option<OwnedMutexGuard<()>>,
}

impl PathLocks {
    /// Waits for the queue of `key` (an absolute real host path).
    pub async fn lock(self: &Arc<Self>, key: PathBuf) -> PathGuard {
        let mutex = {
            let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(table.entry(key.clone()).or_default())
        };
        let guard = mutex.lock_owned().await;
        PathGuard {
            locks: Arc::clone(self),
            key,
            guard: Some(guard),
        }
    }

    /// Number of paths with a holder or waiter (for tests).
    pub fn len(&self) -> usize {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when no path is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for PathGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut table = self.locks.table.lock().unwrap_or_else(|e| e.into_inner());
        // Only the table's own reference left: nobody holds or waits.
        if table
            .get(&self.key)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            table.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn same_path_waits_and_other_paths_do_not() {
        let locks = Arc::new(PathLocks::default());
        let a = locks.lock("/w/a".into()).await;
        // A different path is free at once.
        let b = tokio::time::timeout(Duration::from_secs(1), locks.lock("/w/b".into())).await;
        assert!(b.is_ok());
        // The same path waits until the holder lets go.
        let again =
            tokio::time::timeout(Duration::from_millis(50), locks.lock("/w/a".into())).await;
        assert!(again.is_err());
        drop(a);
        let again = tokio::time::timeout(Duration::from_secs(1), locks.lock("/w/a".into())).await;
        assert!(again.is_ok());
    }

    #[tokio::test]
    async fn table_empties_when_released() {
        let locks = Arc::new(PathLocks::default());
        let g = locks.lock("/w/a".into()).await;
        assert_eq!(locks.len(), 1);
        drop(g);
        assert!(locks.is_empty());
    }
}
