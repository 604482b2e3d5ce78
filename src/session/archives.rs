//! Archives in and out of a session's workspace. The caller's stream
//! reaches the blocking extraction through a bounded channel, read as a
//! file would be; a download is written into a bounded channel as it is
//! walked, so neither side holds more than a few chunks whatever the
//! archive's size, and a caller that goes away stops the work.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::error::Error;
use super::failure;
use super::slots::{Kind, Pace};
use super::tools::Session;
use crate::workspace::archive::{DownloadOptions, Downloaded, Uploaded};

/// The archive's bytes as the caller sends them; an `Err` ends the stream
/// (the caller's transport failed).
pub type Chunks = mpsc::Receiver<io::Result<Vec<u8>>>;

/// An upload done.
#[derive(Debug, Clone)]
pub struct Upload {
    /// Where it landed (workspace-relative; empty for the root).
    pub destination: String,
    /// What it brought.
    pub uploaded: Uploaded,
    /// How long it took.
    pub duration: Duration,
}

/// One message of a download: a chunk of the archive, or the summary.
#[derive(Debug)]
pub enum DownloadEvent {
    /// Archive bytes, in order.
    Chunk(Vec<u8>),
    /// The last event.
    Done {
        /// What the archive holds and left out.
        summary: Downloaded,
        /// How long it took.
        duration: Duration,
    },
}

/// Bytes per download chunk.
const CHUNK: usize = 256 * 1024;

/// Reads the caller's chunks as one stream.
struct ChannelReader {
    rx: Chunks,
    buf: Vec<u8>,
    pos: usize,
    runtime: tokio::runtime::Handle,
    /// A caller that stalls holds a blocking thread and a writer's turn:
    /// past this it is dropped.
    stall: Duration,
    /// A caller that trickles holds its slot: behind this pace it is
    /// dropped.
    pace: Pace,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            let (wait, slow) = bound(self.stall, &self.pace);
            let began = Instant::now();
            let next = self
                .runtime
                .block_on(tokio::time::timeout(wait, self.rx.recv()));
            let waited = began.elapsed();
            let next = match next {
                Ok(next) => next,
                Err(_) if slow => {
                    let _ = self.pace.record(waited, 0);
                    return Err(too_slow(&self.pace));
                }
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no data came for {} s", self.stall.as_secs()),
                    ));
                }
            };
            let got = next
                .as_ref()
                .and_then(|c| c.as_ref().ok())
                .map_or(0, |c| c.len() as u64);
            self.pace
                .record(waited, got)
                .map_err(|e| io::Error::new(io::ErrorKind::TimedOut, e))?;
            match next {
                Some(Ok(chunk)) => {
                    self.buf = chunk;
                    self.pos = 0;
                }
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// How long the next wait for the caller may last, and whether running
/// out means the caller is behind the minimum pace (rather than stalled).
fn bound(stall: Duration, pace: &Pace) -> (Duration, bool) {
    match pace.allowance() {
        Some(left) if left < stall => (left, true),
        _ => (stall, false),
    }
}

fn too_slow(pace: &Pace) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, pace.too_slow())
}

/// Sends what is written, in chunks; fails once the caller went away,
/// stopped reading for `stall`, or fell behind the minimum pace.
struct ChannelWriter {
    tx: mpsc::Sender<Result<DownloadEvent, failure::Error>>,
    buf: Vec<u8>,
    runtime: tokio::runtime::Handle,
    stall: Duration,
    pace: Pace,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        let len = chunk.len() as u64;
        let (wait, slow) = bound(self.stall, &self.pace);
        let began = Instant::now();
        let sent = self
            .runtime
            .block_on(self.tx.send_timeout(Ok(DownloadEvent::Chunk(chunk)), wait));
        let waited = began.elapsed();
        match sent {
            Ok(()) => self
                .pace
                .record(waited, len)
                .map_err(|e| io::Error::new(io::ErrorKind::TimedOut, e)),
            Err(mpsc::error::SendTimeoutError::Timeout(_)) if slow => {
                let _ = self.pace.record(waited, 0);
                Err(too_slow(&self.pace))
            }
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the caller read nothing for {} s", self.stall.as_secs()),
            )),
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the caller went away",
            )),
        }
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

impl Session {
    /// UploadArchive: extracts the archive in `chunks` into `destination`.
    /// An upload before the session's first change is part of where it
    /// began (see [`crate::workspace::history`]).
    /// It waits for the session's share (one upload at a time), its write
    /// turn, and then a slot of the service, in that order: a session that
    /// waits on itself never sits on a slot another session could use.
    /// `turn`, when given, is a slot the caller already holds; it is held
    /// until the extraction ends.
    pub async fn upload_archive(
        &self,
        destination: String,
        chunks: Chunks,
        turn: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<Upload, failure::Error> {
        let started = Instant::now();
        let summary = format!("into {destination:?}");
        let result = self.upload_inner(destination, chunks, started, turn).await;
        match &result {
            Ok(u) => self.journal.changed_tree(
                "UploadArchive",
                &summary,
                started,
                format!(
                    "{} files, {} directories, {} symlinks, {} bytes ({} replaced, {} set-id bits dropped)",
                    u.uploaded.files,
                    u.uploaded.dirs,
                    u.uploaded.symlinks,
                    u.uploaded.bytes,
                    u.uploaded.replaced,
                    u.uploaded.stripped
                ),
            ),
            Err(e) => self.refused("UploadArchive", &summary, started, e),
        }
        result
    }

    async fn upload_inner(
        &self,
        destination: String,
        chunks: Chunks,
        started: Instant,
        turn: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<Upload, failure::Error> {
        self.policy()
            .check_mutation("UploadArchive")
            .map_err(Error::Denied)?;
        let share = self
            .config
            .transfer_shares
            .take(Kind::Upload, &self.id)
            .await;
        let _write_turn = self.history.write_turn().await;
        let turn = match turn {
            Some(turn) => turn,
            None => Arc::clone(&self.config.upload_slots)
                .acquire_owned()
                .await
                .map_err(|_| stopping("archive"))?,
        };
        let (ws, policy) = (self.workspace.clone(), self.policy());
        let limits = self.config.archives.upload;
        let dest = destination.clone();
        let runtime = tokio::runtime::Handle::current();
        let (stall, rate) = (self.config.archives.stall, self.config.archives.min_rate);
        let uploaded = tokio::task::spawn_blocking(move || {
            let _turn = (turn, share);
            let reader = ChannelReader {
                rx: chunks,
                buf: Vec::new(),
                pos: 0,
                runtime,
                stall,
                pace: Pace::new(rate),
            };
            ws.upload_blocking(&dest, reader, limits, &policy)
        })
        .await
        .map_err(|e| Error::InvalidArgument {
            field: "archive",
            why: format!("the extraction task failed: {e}"),
        })??;
        Ok(Upload {
            destination,
            uploaded,
            duration: started.elapsed(),
        })
    }

    /// DownloadArchive: streams a tar archive of `path` (gzip-compressed
    /// if asked). Refusals found before the first byte (a bad path, a
    /// size asked over the ceiling) come back at once; later failures end
    /// the stream.
    pub async fn download_archive(
        self: &Arc<Self>,
        path: String,
        gitignore: bool,
        gzip: bool,
        max_bytes: u64,
    ) -> Result<mpsc::Receiver<Result<DownloadEvent, failure::Error>>, failure::Error> {
        let started = Instant::now();
        let summary = format!("{path:?} gitignore {gitignore} gzip {gzip}");
        let opts = match self.config.download_bytes(max_bytes) {
            Ok(max_bytes) => DownloadOptions {
                max_bytes,
                max_depth: self.config.history.scan.max_depth,
                gitignore,
            },
            Err(e) => {
                let e = e.into();
                self.refused("DownloadArchive", &summary, started, &e);
                return Err(e);
            }
        };
        if let Err(e) = self.workspace.real_dir(&path).await.or_else(|e| match e {
            // A file is fine too; anything else missing is refused now.
            crate::workspace::Error::NotADirectory { .. } => Ok(String::new()),
            e => Err(e),
        }) {
            let e = e.into();
            self.refused("DownloadArchive", &summary, started, &e);
            return Err(e);
        }
        // A download holds up to a directory fd per level: few run at once,
        // and one per session, taken before a slot of the service.
        let share = self
            .config
            .transfer_shares
            .take(Kind::Download, &self.id)
            .await;
        let turn = Arc::clone(&self.config.download_slots)
            .acquire_owned()
            .await
            .map_err(|_| stopping("path"))?;
        let (tx, rx) = mpsc::channel(4);
        let ws = self.workspace.clone();
        let journal_tx = tx.clone();
        let runtime = tokio::runtime::Handle::current();
        let (stall, rate) = (self.config.archives.stall, self.config.archives.min_rate);
        let written = tokio::task::spawn_blocking(move || {
            let _turn = (turn, share);
            let out = ChannelWriter {
                tx: journal_tx,
                buf: Vec::with_capacity(CHUNK),
                runtime,
                stall,
                pace: Pace::new(rate),
            };
            if gzip {
                let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
                let done = ws.download_blocking(&path, opts, &mut gz);
                let finished = gz
                    .finish()
                    .and_then(|mut out| out.flush())
                    .map_err(crate::workspace::archive::DownloadError::Write);
                done.and_then(|d| finished.map(|()| d))
            } else {
                let mut out = out;
                let done = ws.download_blocking(&path, opts, &mut out);
                let flushed = out
                    .flush()
                    .map_err(crate::workspace::archive::DownloadError::Write);
                done.and_then(|d| flushed.map(|()| d))
            }
        });
        let session = Arc::clone(self);
        tokio::spawn(async move {
            let outcome = match written.await {
                Ok(Ok(summary)) => Ok(summary),
                Ok(Err(e)) => Err(failure::Error::from(e)),
                Err(e) => Err(failure::Error::from(Error::InvalidArgument {
                    field: "path",
                    why: format!("the download task failed: {e}"),
                })),
            };
            match outcome {
                Ok(done) => {
                    session.journal.ok(
                        "DownloadArchive",
                        &summary,
                        started,
                        format!(
                            "{} files, {} bytes, {} left out",
                            done.files, done.bytes, done.skipped_count
                        ),
                    );
                    let _ = tx
                        .send(Ok(DownloadEvent::Done {
                            summary: done,
                            duration: started.elapsed(),
                        }))
                        .await;
                }
                Err(e) => {
                    session.refused("DownloadArchive", &summary, started, &e);
                    let _ = tx.send(Err(e)).await;
                }
            }
        });
        Ok(rx)
    }
}

/// The slots are closed only when the service stops.
fn stopping(field: &'static str) -> Error {
    Error::InvalidArgument {
        field,
        why: "the service is stopping".into(),
    }
}
