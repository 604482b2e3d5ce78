//! Readers of a session's process output (ReadProcessOutput), and what
//! bounds them (the readers themselves are in `processes`):
//! - a session has at most [`PER_SESSION`] readers at once, the service
//!   [`defaults::OUTPUT_READERS`] in all; past either, a
//!   new reader is refused (TOO_MANY_READERS);
//! - a reader is pulled, never pushed: output is read from the process's
//!   kept buffer when the caller's transport asks for the next piece, so
//!   a reader that stops reading holds its offsets, not copies of output;
//! - a reader that took a piece and did not come back for the next for
//!   [`STALL`] is stalled: a new reader of its session takes its place,
//!   and it ends (READER_STALLED) if it ever reads again.
//!
//! While a session has a reader that is not stalled, it is in use (its
//! idle timeout waits).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

use super::defaults;
use super::error::Error;
use super::failure;

/// Readers one session may have at once.
pub const PER_SESSION: usize = 16;
/// How long a reader may leave a piece it took unanswered by its next read.
pub const STALL: Duration = Duration::from_secs(60);

/// A session's readers now.
#[derive(Debug, Default)]
pub struct Readers {
    slots: Mutex<Vec<Arc<Slot>>>,
}

/// One reader's standing.
#[derive(Debug)]
pub struct Slot {
    /// When it last took a piece without asking for the next since.
    gave_at: Mutex<Option<Instant>>,
    /// Its place was taken: it ends at its next read.
    evicted: AtomicBool,
    /// Its share of the service's readers, given back at eviction.
    permit: Mutex<Option<OwnedSemaphorePermit>>,
}

impl Slot {
    fn stalled(&self, now: Instant) -> bool {
        lock(&self.gave_at).is_some_and(|at| now.duration_since(at) >= STALL)
    }

    /// Whether another reader took its place.
    pub fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    /// The reader asks for its next piece.
    pub fn asking(&self) {
        *lock(&self.gave_at) = None;
    }

    /// The reader took a piece.
    pub fn took(&self) {
        *lock(&self.gave_at) = Some(Instant::now());
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Readers {
    /// Readers now.
    #[cfg(test)]
    fn count(&self) -> usize {
        lock(&self.slots).len()
    }

    /// Readers now that are not stalled: only these keep their session in
    /// use (a reader nobody reads must not keep a session from its idle
    /// timeout).
    pub fn active(&self) -> usize {
        let now = Instant::now();
        lock(&self.slots).iter().filter(|s| !s.stalled(now)).count()
    }

    /// A place for a new reader, taking a stalled reader's place when the
    /// session has none free.
    pub fn admit(
        &self,
        service: &Arc<tokio::sync::Semaphore>,
    ) -> Result<Arc<Slot>, failure::Error> {
        let mut slots = lock(&self.slots);
        if slots.len() >= PER_SESSION {
            let now = Instant::now();
            let Some(at) = slots.iter().position(|s| s.stalled(now)) else {
                return Err(Error::TooManyReaders {
                    max: PER_SESSION,
                    of: "session",
                }
                .into());
            };
            let stalled = slots.swap_remove(at);
            stalled.evicted.store(true, Ordering::Release);
            lock(&stalled.permit).take();
        }
        let permit = Arc::clone(service).try_acquire_owned().map_err(|_| {
            failure::Error::from(Error::TooManyReaders {
                max: defaults::OUTPUT_READERS,
                of: "service",
            })
        })?;
        let slot = Arc::new(Slot {
            // Not asked for anything yet: a reader that never reads
            // stalls as one that stopped does.
            gave_at: Mutex::new(Some(Instant::now())),
            evicted: AtomicBool::new(false),
            permit: Mutex::new(Some(permit)),
        });
        slots.push(Arc::clone(&slot));
        Ok(slot)
    }

    /// The reader of `slot` is gone.
    pub fn leave(&self, slot: &Arc<Slot>) {
        lock(&self.slots).retain(|s| !Arc::ptr_eq(s, slot));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(n: usize) -> Arc<tokio::sync::Semaphore> {
        Arc::new(tokio::sync::Semaphore::new(n))
    }

    fn refused_as(r: Result<Arc<Slot>, failure::Error>) -> String {
        failure::describe(&r.expect_err("refused"))
            .reason
            .to_string()
    }

    #[test]
    fn a_session_has_its_share_of_readers_and_a_stalled_one_gives_its_place() {
        let all = service(100);
        let readers = Readers::default();
        let slots: Vec<_> = (0..PER_SESSION)
            .map(|_| readers.admit(&all).unwrap())
            .collect();
        assert_eq!(refused_as(readers.admit(&all)), "TOO_MANY_READERS");
        // One took a piece a minute ago and never came back for the next.
        *lock(&slots[3].gave_at) = Instant::now().checked_sub(STALL + Duration::from_secs(1));
        assert_eq!(
            readers.active(),
            PER_SESSION - 1,
            "a stalled reader keeps nobody in use"
        );
        let newcomer = readers.admit(&all).expect("the stalled reader's place");
        assert!(slots[3].evicted.load(Ordering::Acquire));
        assert_eq!(readers.active(), PER_SESSION, "the stalled one is gone");
        assert!(
            !slots
                .iter()
                .enumerate()
                .any(|(i, s)| i != 3 && s.evicted.load(Ordering::Acquire))
        );
        assert_eq!(readers.count(), PER_SESSION);
        // Its share of the service came back with its place.
        assert_eq!(all.available_permits(), 100 - PER_SESSION);
        // A reader that waits for output (none taken) is never stalled.
        assert_eq!(refused_as(readers.admit(&all)), "TOO_MANY_READERS");
        readers.leave(&newcomer);
        assert_eq!(readers.count(), PER_SESSION - 1);
    }

    #[test]
    fn the_service_bounds_readers_over_all_sessions() {
        let all = service(3);
        let (a, b) = (Readers::default(), Readers::default());
        let _held = [
            a.admit(&all).unwrap(),
            a.admit(&all).unwrap(),
            b.admit(&all).unwrap(),
        ];
        assert_eq!(refused_as(b.admit(&all)), "TOO_MANY_READERS");
        assert_eq!(b.count(), 1, "a refused reader takes no place");
    }
}
