//! What a session's replies may hold in the service before its caller
//! reads them. A reply is kept whole until the caller's transport takes
//! it, and a caller that never reads (a zero flow-control window) could
//! leave hundreds of large ones waiting. Each session has a budget of
//! [`BUDGET_BYTES`] for replies not yet taken; a large reply reserves its
//! size from it, and the reservation ([`ReplyBytes`]) travels with the
//! reply until the transport has sent it or dropped it. A reply that finds
//! the budget spent waits up to [`WAIT`], then is refused (REPLIES_UNREAD).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::Error;
use super::failure;

/// Bytes of replies one session may leave unread.
pub const BUDGET_BYTES: usize = 32 << 20;
/// The budget's unit.
const UNIT: usize = 1024;
/// How long a reply waits for the budget.
pub const WAIT: Duration = Duration::from_secs(10);

/// A session's budget of unread replies.
#[derive(Debug)]
pub struct Replies(Arc<Semaphore>);

impl Default for Replies {
    fn default() -> Self {
        Replies(Arc::new(Semaphore::new(BUDGET_BYTES / UNIT)))
    }
}

/// A reply's reservation: given back when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct ReplyBytes(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

impl Replies {
    /// Reserves `bytes` (at most the whole budget) for one reply.
    pub async fn reserve(&self, bytes: usize) -> Result<ReplyBytes, failure::Error> {
        self.reserve_within(bytes, WAIT).await
    }

    /// Reserves `bytes` for one reply if the budget has them now.
    pub fn try_reserve(&self, bytes: usize) -> Option<ReplyBytes> {
        let permit = Arc::clone(&self.0)
            .try_acquire_many_owned(units(bytes))
            .ok()?;
        Some(ReplyBytes(Arc::new(permit)))
    }

    async fn reserve_within(
        &self,
        bytes: usize,
        wait: Duration,
    ) -> Result<ReplyBytes, failure::Error> {
        let take = Arc::clone(&self.0).acquire_many_owned(units(bytes));
        match tokio::time::timeout(wait, take).await {
            Ok(Ok(permit)) => Ok(ReplyBytes(Arc::new(permit))),
            _ => Err(Error::RepliesUnread {
                budget: BUDGET_BYTES,
                secs: WAIT.as_secs(),
            }
            .into()),
        }
    }
}

/// The budget's units `bytes` take (at most the whole budget).
fn units(bytes: usize) -> u32 {
    let units = bytes.div_ceil(UNIT).clamp(1, BUDGET_BYTES / UNIT);
    u32::try_from(units).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unread_replies_spend_the_budget_until_they_are_dropped() {
        let replies = Replies::default();
        let a = replies.reserve(BUDGET_BYTES / 2).await.unwrap();
        let b = replies.reserve(BUDGET_BYTES / 2).await.unwrap();
        let refused = replies
            .reserve_within(1, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(failure::describe(&refused).reason, "REPLIES_UNREAD");
        drop(a);
        let c = replies.reserve(BUDGET_BYTES / 4).await.unwrap();
        // A reply larger than the whole budget takes it all, and waits for it.
        let waiting = tokio::spawn({
            let replies = Replies(Arc::clone(&replies.0));
            async move { replies.reserve(BUDGET_BYTES * 4).await.is_ok() }
        });
        tokio::task::yield_now().await;
        drop((b, c));
        assert!(waiting.await.unwrap());
    }
}
