//! Wrong tokens are slowed down. Any local user can try tokens against a
//! loopback port as fast as it answers, so past a few failures in a
//! minute each further wrong token is answered after a pause, one at a
//! time: guessing runs at a few tries a second, however many connections
//! try together. A call carrying a right token never waits here. Every
//! local user reaches the service from the same loopback address, so the
//! count is the listener's, not a peer's; failures are counted in the
//! metrics (`sandboxd_auth_failures_total`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::metrics::Metrics;

/// Failures answered at once in each [`WINDOW`].
pub const FREE: u32 = 5;
/// The window the free failures are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// The pause before each failure past the free ones is answered.
pub const PAUSE: Duration = Duration::from_millis(250);

/// One listener's count of failed logins.
#[derive(Debug)]
pub struct Throttle {
    recent: Mutex<(Instant, u32)>,
    turn: tokio::sync::Mutex<()>,
    metrics: Option<Arc<Metrics>>,
}

impl Throttle {
    /// A throttle counting into `metrics`, if any.
    pub fn new(metrics: Option<Arc<Metrics>>) -> Throttle {
        Throttle {
            recent: Mutex::new((Instant::now(), 0)),
            turn: tokio::sync::Mutex::new(()),
            metrics,
        }
    }

    /// A wrong token was given: returns when its refusal may be answered.
    pub async fn failed(&self) {
        if let Some(m) = &self.metrics {
            m.auth_failures.inc();
        }
        let n = {
            let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.0.elapsed() >= WINDOW {
                *recent = (Instant::now(), 0);
            }
            recent.1 = recent.1.saturating_add(1);
            recent.1
        };
        if n <= FREE {
            return;
        }
        // One at a time: many connections trying together gain nothing.
        let _turn = self.turn.lock().await;
        tokio::time::sleep(PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn past_the_free_failures_each_waits_its_turn() {
        let metrics = Arc::new(Metrics::new());
        let t = Arc::new(Throttle::new(Some(Arc::clone(&metrics))));
        let started = Instant::now();
        for _ in 0..FREE {
            t.failed().await;
        }
        assert!(started.elapsed() < PAUSE, "the free ones wait for nothing");
        // Eight together: one after the other.
        let started = Instant::now();
        let all: Vec<_> = (0..8)
            .map(|_| {
                let t = Arc::clone(&t);
                tokio::spawn(async move { t.failed().await })
            })
            .collect();
        for one in all {
            one.await.unwrap();
        }
        assert!(started.elapsed() >= PAUSE * 8, "{:?}", started.elapsed());
        assert!(
            metrics.encode().contains("sandboxd_auth_failures_total 13"),
            "{}",
            metrics.encode()
        );
    }
}
