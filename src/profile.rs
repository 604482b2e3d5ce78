//! Where a command's time goes: named marks on one monotonic clock, taken
//! along the path of a call from the service to the supervisor inside the
//! container and back, for `sandboxd bench`'s breakdown.
//!
//! Off unless [`record`] turned it on; a mark then costs one relaxed load.
//! The clock is `CLOCK_MONOTONIC`, which a container (runc, no time
//! namespace) shares with its host, so the supervisor's own marks, carried
//! back in its exit frame, line up with the service's.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static ON: AtomicBool = AtomicBool::new(false);
static MARKS: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());

/// Nanoseconds on the shared monotonic clock.
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Whether marks are being recorded.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Marks `stage` as reached now.
pub fn mark(stage: &'static str) {
    if on() {
        mark_at(stage, now_ns());
    }
}

/// Marks `stage` as reached at `ns` (a time taken elsewhere, such as in the
/// container). A zero time (not taken) is skipped.
pub fn mark_at(stage: &'static str, ns: u64) {
    if on() && ns != 0 {
        MARKS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((stage, ns));
    }
}

/// Starts (`true`) or stops recording; starting forgets earlier marks.
pub fn record(on: bool) {
    if on {
        MARKS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
    ON.store(on, Ordering::Relaxed);
}

/// The marks recorded so far, in the order they were taken, emptied.
pub fn take() -> Vec<(&'static str, u64)> {
    std::mem::take(&mut *MARKS.lock().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_kept_only_while_recording() {
        mark("before");
        record(true);
        mark("one");
        mark_at("two", 5);
        mark_at("never taken", 0);
        let marks = take();
        record(false);
        mark("after");
        assert_eq!(
            marks.iter().map(|m| m.0).collect::<Vec<_>>(),
            ["one", "two"]
        );
        assert_eq!(marks[1].1, 5);
        assert!(take().is_empty());
    }
}
