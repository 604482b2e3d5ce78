//! A reader of a process's output (ReadProcessOutput): pulled, never
//! pushed, and holding a place among the session's readers (see the
//! session's `readers`) for as long as it is open.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;

use crate::session::error::Error;
use crate::session::failure;
use crate::session::messages::OutputPiece;
use crate::session::process_table::{CHUNK, Live};
use crate::session::readers::{STALL, Slot};
use crate::session::tools::Session;

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
        if self.slot.evicted() {
            self.done = true;
            return Poll::Ready(Some(Err(Error::ReaderStalled {
                secs: STALL.as_secs(),
            }
            .into())));
        }
        self.slot.asking();
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(piece)) => {
                self.slot.took();
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
