//! A warm pool: containers started ahead of need, so a new session with a
//! fresh workspace, the pool's image (the default one, or an environment's)
//! and the default limits starts without waiting for Docker; or, in the
//! pool for lent directories, a session over an existing directory. Fills run in the background; an atomic count
//! of those in flight, reserved by compare-and-swap, keeps concurrent
//! top-ups from starting more than the pool is short of, and a flag set at
//! shutdown makes fills still in flight remove what they made.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::config::Config;
use super::lend::prepare_slot;
use super::prepare::{Prepared, discard, prepare};
use crate::sandbox::Runtime;
use crate::volume::Volumes;
use crate::workspace::lock::PathLocks;

/// Warm sessions-to-be: fresh workspaces whose container (default image,
/// default limits, the same hardening as any other) already runs with its
/// supervisor, so a new session starts without waiting for Docker. Each
/// carries its future session id in its labels, so it is swept like any
/// other container if the service dies.
#[derive(Default)]
pub(super) struct Pool {
    ready: Mutex<VecDeque<Prepared>>,
    filling: AtomicUsize,
    /// Set at shutdown: fills still in flight discard what they made.
    closed: AtomicBool,
    /// Set while its environment is being deleted: no fill starts.
    paused: AtomicBool,
    /// Its entries are slots, lent a directory when taken (see
    /// [`super::prepare::lend`]), rather than fresh workspaces.
    lent: bool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("ready", &self.ready())
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// A pool of containers for sessions over an existing directory: each
    /// binds a slot and is lent the directory when taken.
    pub(super) fn for_lent() -> Pool {
        Pool {
            lent: true,
            ..Pool::default()
        }
    }

    pub(super) fn take(&self) -> Option<Prepared> {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    pub(super) fn ready(&self) -> usize {
        self.ready.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Ids of the warm entries ready now.
    pub(super) fn ids(&self) -> Vec<String> {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|p| p.id.clone())
            .collect()
    }

    /// Whether filling is stopped.
    pub(super) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Stops or resumes filling (fills in flight go on, and discard what
    /// they make while the pool is stopped: see [`Pool::settled`]).
    pub(super) fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::SeqCst);
    }

    /// Takes every entry ready now, leaving the pool open.
    pub(super) fn clear(&self) -> Vec<Prepared> {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect()
    }

    /// Takes the entries whose image is not `image` (made before their
    /// environment was built again).
    pub(super) fn stale(&self, image: &str) -> Vec<Prepared> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        let (keep, stale) = ready
            .drain(..)
            .partition(|p: &Prepared| p.sandbox.spec().image == image);
        *ready = keep;
        stale.into()
    }

    /// Closes the pool for good and returns what was ready. Fills still in
    /// flight clean up after themselves; [`Pool::settled`] waits for them.
    pub(super) fn drain(&self) -> Vec<Prepared> {
        self.closed.store(true, Ordering::SeqCst);
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect()
    }

    /// Waits (bounded) until no fill is in flight.
    pub(super) async fn settled(&self) {
        let until = Instant::now() + Duration::from_secs(30);
        while self.filling.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts enough background fills of `image` to have `want` ready,
    /// each beginning `after` from now (its place is reserved at once).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill(
        self: &Arc<Self>,
        config: &Arc<Config>,
        runtime: &Arc<dyn Runtime>,
        locks: &Arc<PathLocks>,
        volumes: &Arc<Volumes>,
        image: &str,
        want: usize,
        keep: Option<&super::records::Keep>,
        after: Duration,
    ) {
        loop {
            if self.closed.load(Ordering::SeqCst) || self.paused.load(Ordering::SeqCst) {
                return;
            }
            let filling = self.filling.load(Ordering::SeqCst);
            if self.ready() + filling >= want {
                return;
            }
            if self
                .filling
                .compare_exchange(filling, filling + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                continue;
            }
            // Paused or closed while this fill reserved its place: whoever
            // did it may have found no fill in flight and gone on.
            if self.closed.load(Ordering::SeqCst) || self.paused.load(Ordering::SeqCst) {
                self.filling.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            let (pool, config, runtime, locks, volumes, image, keep) = (
                Arc::clone(self),
                Arc::clone(config),
                Arc::clone(runtime),
                Arc::clone(locks),
                Arc::clone(volumes),
                image.to_string(),
                keep.cloned(),
            );
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                if pool.closed.load(Ordering::SeqCst) {
                    pool.filling.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
                let prepared = if pool.lent {
                    prepare_slot(&config, &runtime, &volumes, image).await
                } else {
                    let limits = config.sandbox.default_limits;
                    prepare(&config, &runtime, &locks, &volumes, None, image, limits).await
                }
                .map_err(|e| e.to_string());
                // A durable service's files are made now, not when a caller waits.
                let prepared = match (prepared, keep) {
                    (Ok(mut warm), Some(keep)) => {
                        let id = warm.id.clone();
                        let made = tokio::task::spawn_blocking({
                            let keep = keep.clone();
                            move || keep.reserve(&id)
                        })
                        .await;
                        match made {
                            Ok(Ok(r)) => {
                                warm.reserved = Some((keep, r));
                                Ok(warm)
                            }
                            Ok(Err(e)) => {
                                discard(warm).await;
                                Err(e.to_string())
                            }
                            Err(e) => {
                                discard(warm).await;
                                Err(e.to_string())
                            }
                        }
                    }
                    (prepared, _) => prepared,
                };
                match prepared {
                    Ok(warm) => {
                        let started = warm.sandbox.ensure().await;
                        if let Err(e) = &started {
                            tracing::debug!(error = %e, "cannot warm a container");
                        }
                        // Decided under the lock drain takes: an entry is
                        // either drained at shutdown (or cleared when the
                        // pool is stopped) or discarded here.
                        let leftover = {
                            let mut ready = pool.ready.lock().unwrap_or_else(|e| e.into_inner());
                            if started.is_ok()
                                && !pool.closed.load(Ordering::SeqCst)
                                && !pool.paused.load(Ordering::SeqCst)
                            {
                                ready.push_back(warm);
                                None
                            } else {
                                Some(warm)
                            }
                        };
                        if let Some(warm) = leftover {
                            discard(warm).await;
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot prepare a warm workspace"),
                }
                pool.filling.fetch_sub(1, Ordering::SeqCst);
            });
        }
    }
}
