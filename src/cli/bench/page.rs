//! One page watching a session live, as a browser does it: the session's
//! timeline fetched every two seconds (the interval of the web view's
//! live.js) and a running command's output held open over server-sent
//! events, in plain HTTP/1.1 over loopback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::AnyError;

/// How often the page fetches its timeline (live.js's `setInterval`).
pub(super) const POLL: Duration = Duration::from_secs(2);
/// Longest a request of the page may take before the figure fails.
const DEADLINE: Duration = Duration::from_secs(10);

/// What the pages of a run saw.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// Timeline fetches answered 200.
    pub polls: AtomicU64,
    /// Timeline fetches that failed (any other answer, or none).
    pub failed: AtomicU64,
    /// Bytes of the last timeline answered.
    pub timeline_bytes: AtomicU64,
    /// Microseconds the slowest timeline fetch took.
    pub slowest_us: AtomicU64,
    /// `out` events the live streams delivered.
    pub events: AtomicU64,
}

/// A page open on a session; closing it drops its connections.
pub(super) struct Page {
    tasks: Vec<JoinHandle<()>>,
}

impl Page {
    /// Opens the live stream of command `seq` of session `id` on the web
    /// view at `addr` (answered 200 with an event stream, or an error), and
    /// starts fetching the session's timeline: after `first`, then every
    /// [`POLL`].
    pub async fn open(
        addr: SocketAddr,
        id: &str,
        seq: u64,
        first: Duration,
        seen: &Arc<Seen>,
    ) -> Result<Page, AnyError> {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let request = format!(
            "GET /sessions/{id}/commands/{seq}/live HTTP/1.1\r\nHost: {addr}\r\n\
             Accept: text/event-stream\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let (head, rest) = tokio::time::timeout(DEADLINE, read_head(&mut stream)).await??;
        if !head.starts_with("HTTP/1.1 200") || !head.contains("text/event-stream") {
            return Err(format!("the live stream answered: {head}").into());
        }
        let live = tokio::spawn(follow(stream, rest, Arc::clone(seen)));
        let path = format!("/parts/sessions/{id}/timeline");
        let poller = tokio::spawn(poll(addr, path, first, Arc::clone(seen)));
        Ok(Page {
            tasks: vec![live, poller],
        })
    }
}

impl Drop for Page {
    /// The page's connections are dropped, as when a browser closes the tab.
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Reads an answer's status line and headers; returns them and whatever
/// of the body came with them.
async fn read_head(stream: &mut TcpStream) -> Result<(String, Vec<u8>), AnyError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err("the web view closed the connection before answering".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..at]).into_owned();
            return Ok((head, buf[at + 4..].to_vec()));
        }
        if buf.len() > 64 << 10 {
            return Err("an answer's headers past 64 KiB".into());
        }
    }
}

/// Reads the event stream until it ends, counting `out` events. The body
/// is chunked: chunk sizes stand on lines of their own, and an event's
/// lines are never split (each event is one chunk).
async fn follow(mut stream: TcpStream, mut buf: Vec<u8>, seen: Arc<Seen>) {
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(at) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=at).collect();
            if line.trim_ascii() == b"event: out" {
                seen.events.fetch_add(1, Ordering::Relaxed);
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Fetches `path` after `first` and every [`POLL`] after that, a
/// connection each time.
async fn poll(addr: SocketAddr, path: String, first: Duration, seen: Arc<Seen>) {
    let start = tokio::time::Instant::now() + first;
    let mut every = tokio::time::interval_at(start, POLL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let t = std::time::Instant::now();
        match tokio::time::timeout(DEADLINE, get(addr, &path)).await {
            Ok(Ok(bytes)) => {
                let took = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                seen.slowest_us.fetch_max(took, Ordering::Relaxed);
                seen.polls.fetch_add(1, Ordering::Relaxed);
                seen.timeline_bytes.store(bytes, Ordering::Relaxed);
            }
            _ => {
                seen.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// GET `path` on a connection of its own; the bytes of the answer when it
/// is 200.
async fn get(addr: SocketAddr, path: &str) -> Result<u64, AnyError> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    if !answer.starts_with(b"HTTP/1.1 200") {
        return Err("the timeline was not answered 200".into());
    }
    Ok(answer.len() as u64)
}
