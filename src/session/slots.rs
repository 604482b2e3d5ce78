//! Fair shares of the service's transfer slots. Uploads and downloads
//! each have a few slots over the whole service (each running transfer
//! holds a blocking thread, a directory fd per level and a few chunks);
//! without a share, one session could take all of them and, trickling a
//! byte now and then, keep every other session waiting.
//!
//! Two bounds make one session unable to block another:
//! - [`Shares`]: a session holds at most one slot of each kind. It waits
//!   for its own share before it asks for a slot of the service, so a
//!   session waiting on itself never sits on a slot another could use.
//! - [`Pace`]: a transfer that holds a slot must keep up a minimum rate.
//!   Each byte moved earns time (1 / rate seconds); time spent waiting
//!   for the caller (the next chunk of an upload, room for the next chunk
//!   of a download) spends it. The balance starts at, and never rises
//!   above, a grace period: a caller may fall that far behind, and no
//!   further, however fast it was earlier. Only the caller's waits count,
//!   so the service's own slowness (a slow disk, a deep walk) never
//!   fails a transfer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The two kinds of transfer slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// UploadArchive.
    Upload,
    /// DownloadArchive.
    Download,
}

/// Which sessions hold a transfer slot of each kind now. Shared by every
/// session of a service (it lives in the configuration, as the slots do).
#[derive(Debug, Default)]
pub struct Shares {
    held: Mutex<HashMap<(Kind, String), Arc<Semaphore>>>,
}

/// A session's share of one kind, held for as long as its transfer runs.
#[derive(Debug)]
pub struct Share {
    shares: Arc<Shares>,
    key: (Kind, String),
    permit: Option<OwnedSemaphorePermit>,
}

impl Shares {
    /// Waits until `session` holds no other transfer of `kind`.
    pub async fn take(self: &Arc<Self>, kind: Kind, session: &str) -> Share {
        let key = (kind, session.to_string());
        let gate = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(
                held.entry(key.clone())
                    .or_insert_with(|| Arc::new(Semaphore::new(1))),
            )
        };
        // The semaphore is never closed: acquiring only fails when it is.
        let permit = gate.acquire_owned().await.ok();
        Share {
            shares: Arc::clone(self),
            key,
            permit,
        }
    }

    /// Sessions holding or waiting for a share now (entries are removed
    /// with their last holder, so the table stays as small as the
    /// transfers running).
    pub fn len(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no session holds or waits for a share.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut held = self.shares.held.lock().unwrap_or_else(|e| e.into_inner());
        // Only the table still points at it: nobody holds or waits for it.
        // Waiters clone the gate under this same lock, so none can appear
        // between the check and the removal.
        if held
            .get(&self.key)
            .is_some_and(|gate| Arc::strong_count(gate) == 1)
        {
            held.remove(&self.key);
        }
    }
}

/// The minimum pace of one transfer (see the module's notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinRate {
    /// Bytes per second a transfer must keep up, counted over the time it
    /// waits for its caller; 0 turns the bound off.
    pub bytes_per_sec: u64,
    /// How far behind that rate a caller may fall.
    pub grace: Duration,
}

/// Why a transfer was stopped: its caller fell behind the minimum rate.
/// Carried inside the `io::Error` the transfer fails with, so the table
/// of what callers are told can name the bound.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the caller moved {bytes} bytes in {waited_secs} s of waiting for it, under the minimum \
     rate of {} bytes per second (with {} s of grace)",
    rate.bytes_per_sec,
    rate.grace.as_secs()
)]
pub struct TooSlow {
    /// The bound.
    pub rate: MinRate,
    /// Bytes moved when it was stopped.
    pub bytes: u64,
    /// Seconds spent waiting for the caller.
    pub waited_secs: u64,
}

impl TooSlow {
    /// The [`TooSlow`] that stopped a transfer, wherever it sits in the
    /// chain of `err` (readers over the caller's stream, such as the gzip
    /// and tar ones, wrap the error they were given).
    pub fn within<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a TooSlow> {
        let mut at = Some(err);
        // A chain is short; the bound only guards against a cycle.
        for _ in 0..16 {
            let err = at?;
            if let Some(slow) = err.downcast_ref::<TooSlow>() {
                return Some(slow);
            }
            // `io::Error::source` skips the error it wraps: look inside.
            at = match err.downcast_ref::<std::io::Error>() {
                Some(io) => io
                    .get_ref()
                    .map(|inner| inner as &(dyn std::error::Error + 'static)),
                None => err.source(),
            };
        }
        None
    }
}

/// The balance of one transfer against its [`MinRate`].
#[derive(Debug)]
pub struct Pace {
    rate: MinRate,
    /// Seconds the caller may still wait before the transfer is stopped.
    balance: f64,
    bytes: u64,
    waited: Duration,
}

impl Pace {
    /// A transfer starting now, with a full grace period.
    pub fn new(rate: MinRate) -> Pace {
        Pace {
            rate,
            balance: rate.grace.as_secs_f64(),
            bytes: 0,
            waited: Duration::ZERO,
        }
    }

    /// How long the next wait for the caller may last: past it the
    /// transfer is behind the minimum rate. `None` when there is no bound.
    pub fn allowance(&self) -> Option<Duration> {
        (self.rate.bytes_per_sec > 0).then(|| Duration::from_secs_f64(self.balance.max(0.0)))
    }

    /// Counts a wait for the caller of `waited` that brought (or made room
    /// for) `bytes`; fails once the caller has fallen behind.
    pub fn record(&mut self, waited: Duration, bytes: u64) -> Result<(), TooSlow> {
        self.bytes = self.bytes.saturating_add(bytes);
        self.waited += waited;
        if self.rate.bytes_per_sec == 0 {
            return Ok(());
        }
        self.balance -= waited.as_secs_f64();
        if self.balance < 0.0 {
            return Err(self.too_slow());
        }
        let earned = bytes as f64 / self.rate.bytes_per_sec as f64;
        self.balance = (self.balance + earned).min(self.rate.grace.as_secs_f64());
        Ok(())
    }

    /// The error naming the bound, as things stand.
    pub fn too_slow(&self) -> TooSlow {
        TooSlow {
            rate: self.rate,
            bytes: self.bytes,
            waited_secs: self.waited.as_secs(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(bytes_per_sec: u64, grace_secs: u64) -> MinRate {
        MinRate {
            bytes_per_sec,
            grace: Duration::from_secs(grace_secs),
        }
    }

    #[test]
    fn a_trickle_is_stopped_once_the_grace_is_spent() {
        let mut pace = Pace::new(rate(1024, 30));
        // One byte every 20 s: the second wait goes past the grace.
        assert!(pace.record(Duration::from_secs(20), 1).is_ok());
        let e = pace.record(Duration::from_secs(20), 1).unwrap_err();
        assert_eq!((e.bytes, e.waited_secs), (2, 40));
        assert!(e.to_string().contains("minimum rate of 1024 bytes"), "{e}");
    }

    #[test]
    fn speed_earlier_does_not_buy_a_trickle_later() {
        let mut pace = Pace::new(rate(1024, 30));
        // A gigabyte at once would earn days; the balance stays at the grace.
        pace.record(Duration::from_millis(10), 1 << 30).unwrap();
        assert_eq!(pace.allowance(), Some(Duration::from_secs(30)));
        assert!(pace.record(Duration::from_secs(31), 1).is_err());
    }

    #[test]
    fn the_bound_is_found_inside_wrapping_errors() {
        let slow = Pace::new(rate(1, 1)).too_slow();
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, slow);
        // As tar wraps a failed read: another error kind, the first as source.
        #[derive(Debug, thiserror::Error)]
        #[error("failed to read entire block")]
        struct Wrap(#[source] std::io::Error);
        let wrapped = std::io::Error::other(Wrap(io));
        assert!(TooSlow::within(&wrapped).is_some());
        let plain = std::io::Error::other("no data came for 60 s");
        assert!(TooSlow::within(&plain).is_none());
    }

    #[test]
    fn a_caller_at_the_rate_is_never_stopped() {
        let mut pace = Pace::new(rate(1024, 5));
        for _ in 0..10_000 {
            pace.record(Duration::from_secs(1), 1024).unwrap();
        }
        let mut off = Pace::new(rate(0, 0));
        assert_eq!(off.allowance(), None);
        off.record(Duration::from_secs(3600), 0).unwrap();
    }

    #[tokio::test]
    async fn a_session_holds_one_share_of_a_kind_and_the_table_empties() {
        let shares = Arc::new(Shares::default());
        let first = shares.take(Kind::Upload, "a").await;
        // Another kind, another session: at once.
        let other_kind = shares.take(Kind::Download, "a").await;
        let other_session = shares.take(Kind::Upload, "b").await;
        let second = {
            let shares = Arc::clone(&shares);
            tokio::spawn(async move { shares.take(Kind::Upload, "a").await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!second.is_finished(), "a session's second upload waits");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the share passes on")
            .unwrap();
        assert_eq!(shares.len(), 3);
        drop((second, other_kind, other_session));
        assert!(shares.is_empty());
    }
}
