//! The session's starting point (its baseline): taken just before its
//! first change, or adopted then if it was taken early (see `early`), or
//! marked as lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::super::tree::scan_until;
use super::persist::{BASELINE, persist};
use super::{Baseline, History};

impl History {
    /// Marks the session's starting point as lost (`why`): changes since
    /// the start are then refused with that reason rather than told from a
    /// later point as if it were the start. Checkpoints taken from now on
    /// work as ever.
    pub async fn lose_baseline(&self, why: String) {
        let mut state = self.state.lock().await;
        state.baseline = Baseline::Failed(why);
        state.baseline_memory = 0;
        self.early.store(false, Ordering::Release);
        self.begun.store(true, Ordering::Release);
    }

    /// Takes the baseline if this is the session's first change. Never
    /// fails: a baseline that cannot be kept is recorded as such.
    /// Bounded like every scan (a command waits for it at most
    /// [`ScanLimits::max_time`]; a file past the per-file bound is never
    /// read), and never cancelled with its caller: a command given up on
    /// must not cost the session its starting point.
    pub async fn begin(&self) {
        if self.begun.load(Ordering::Acquire) {
            return;
        }
        if self.early.load(Ordering::Acquire) && self.adopt_early().await {
            return;
        }
        self.take_baseline(false).await;
    }

    /// Takes the baseline now (see [`History::begin`]); `early`: ahead of
    /// the first change (see `early`), kept only if it could be taken.
    pub(super) async fn take_baseline(&self, early: bool) {
        let mut state = Arc::clone(&self.state).lock_owned().await;
        if !matches!(state.baseline, Baseline::NotYet) {
            return;
        }
        // An early one never waits for a walk slot (the session's opening
        // would wait behind every walk of the service): when none is free
        // it is left to the first change.
        let turn = if early {
            match self.workspace.try_walk_turn() {
                Some(turn) => Some(turn),
                None => return,
            }
        } else {
            self.scan_turn().await.ok()
        };
        crate::profile::mark("history: scan turn taken");
        let (ws, limits) = (self.workspace.clone(), self.limits);
        let (begun, early_flag) = (Arc::clone(&self.begun), Arc::clone(&self.early));
        let taken = tokio::task::spawn_blocking(move || {
            crate::profile::mark("history: blocking task ran");
            let _turn = turn;
            let st = &mut *state;
            let never = AtomicBool::new(false);
            let picture = scan_until(ws.root_fd(), None, limits.scan, Some(&mut st.store), &never);
            crate::profile::mark("history: scanned");
            st.baseline = match picture {
                Ok(m) => {
                    st.store.retain(&m);
                    st.store.seal();
                    st.baseline_memory = m.memory();
                    let m = Arc::new(m);
                    st.cache = Some(Arc::clone(&m));
                    Baseline::Taken(m)
                }
                // An early one that cannot be kept is tried again at the
                // first change, which records why if it fails then too.
                Err(_) if early => {
                    st.store.collect();
                    return;
                }
                Err(e) => {
                    st.store.collect();
                    tracing::warn!(error = %e, "the session's starting point cannot be kept");
                    Baseline::Failed(e.to_string())
                }
            };
            st.early = early;
            let picture = match &st.baseline {
                Baseline::Taken(m) => Some((BASELINE, Arc::clone(m))),
                _ => None,
            };
            persist(st, picture.as_ref().map(|(n, m)| (*n, &**m)));
            if early {
                early_flag.store(true, Ordering::Release);
            } else {
                begun.store(true, Ordering::Release);
            }
            crate::profile::mark("history: persisted");
        })
        .await;
        if let Err(e) = taken {
            tracing::warn!(error = %e, "taking the session's starting point failed");
        }
    }
}
