//! Readers of a session's process output (ReadProcessOutput), and what
//! bounds them:
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
//! While a session has a reader, it is in use (its idle timeout waits).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::Stream;
use tokio::sync::OwnedSemaphorePermit;

use crate::session::defaults;
use crate::session::error::Error;
use crate::session::failure;
use crate::session::messages::OutputPiece;
use crate::session::process_table::{CHUNK, Live};
use crate::session::tools::Session;

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
struct Slot {
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
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Readers {
    /// Readers now.
    pub fn count(&self) -> usize {
        lock(&self.slots).len()
    }

    /// A place for a new reader, taking a stalled reader's place when the
    /// session has none free.
    fn admit(&self, service: &Arc<tokio::sync::Semaphore>) -> Result<Arc<Slot>, failure::Error> {
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
            gave_at: Mutex::new(None),
            evicted: AtomicBool::new(false),
            permit: Mutex::new(Some(permit)),
        });
        slots.push(Arc::clone(&slot));
        Ok(slot)
    }

    fn leave(&self, slot: &Arc<Slot>) {
        lock(&self.slots).retain(|s| !Arc::ptr_eq(s, slot));
    }
}

/// A reader's stream of output pieces (see the module's notes).
pub struct OutputStream {
    inner: Pin<Box<dyn Stream<Item = OutputPiece> + Send>>,
    slot: Arc<Slot>,
    session: Arc<Session>,
    done: bool,
}

impl std::fmt::Debug for OutputStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputStream").finish_non_exhaustive()
    }
}

impl OutputStream {
    /// A reader of `session` whose pieces are `pieces`, if it has a place.
    pub(super) fn open(
        session: &Arc<Session>,
        pieces: impl Stream<Item = OutputPiece> + Send + 'static,
    ) -> Result<OutputStream, failure::Error> {
        let slot = session.readers.admit(&session.config.output_readers)?;
        Ok(OutputStream {
            inner: Box::pin(pieces),
            slot,
            session: Arc::clone(session),
            done: false,
        })
    }
}

impl Stream for OutputStream {
    type Item = Result<OutputPiece, failure::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.slot.evicted.load(Ordering::Acquire) {
            self.done = true;
            return Poll::Ready(Some(Err(Error::ReaderStalled {
                secs: STALL.as_secs(),
            }
            .into())));
        }
        *lock(&self.slot.gave_at) = None;
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(piece)) => {
                *lock(&self.slot.gave_at) = Some(Instant::now());
                Poll::Ready(Some(Ok(piece)))
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for OutputStream {
    fn drop(&mut self) {
        self.session.readers.leave(&self.slot);
        self.session.touch();
    }
}

/// What a reader has read so far.
struct Cursor {
    live: Arc<Live>,
    from: [u64; 2],
    follow: bool,
    changes: tokio::sync::watch::Receiver<u64>,
    over: bool,
}

/// The pieces of `live`'s kept output from `from` on, each read when it
/// is asked for; with `follow`, new output as it comes until the process
/// ends; the last piece says where to read on from.
pub(super) fn pieces(
    live: Arc<Live>,
    from: [u64; 2],
    follow: bool,
) -> impl Stream<Item = OutputPiece> + Send + 'static {
    let changes = live.watch();
    let cursor = Cursor {
        live,
        from,
        follow,
        changes,
        over: false,
    };
    futures_util::stream::unfold(cursor, |mut c| async move {
        if c.over {
            return None;
        }
        loop {
            // Taken before reading: whatever it wrote before it ended is
            // kept by then, so a read after an end misses nothing.
            let ended = c.live.has_ended();
            c.changes.mark_unchanged();
            for stream in 0..2 {
                let read = c.live.output()[stream].read(c.from[stream], CHUNK);
                if read.data.is_empty() {
                    c.from[stream] = read.offset;
                    continue;
                }
                c.from[stream] = read.offset + read.data.len() as u64;
                let piece = OutputPiece::Chunk {
                    stderr: stream == 1,
                    read,
                };
                return Some((piece, c));
            }
            if ended || !c.follow {
                c.over = true;
                let end = OutputPiece::End {
                    stdout_offset: c.from[0],
                    stderr_offset: c.from[1],
                    info: c.live.info(),
                };
                return Some((end, c));
            }
            if c.changes.changed().await.is_err() {
                return None;
            }
        }
    })
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
        let newcomer = readers.admit(&all).expect("the stalled reader's place");
        assert!(slots[3].evicted.load(Ordering::Acquire));
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
