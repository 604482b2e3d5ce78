//! The metrics endpoint: `GET /metrics` in Prometheus's text format over
//! plain HTTP/1.1, one request per connection. Its listener goes through
//! the same [`Gate`] as the gRPC one: a stranger holding idle connections
//! to it, or sending its request a byte at a time, is closed at the read
//! deadline or for a newer scrape, and never holds the descriptors the
//! service needs.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::listener::{ConnectionLimits, Gate, Guarded, incoming};
use crate::session::Registry;

/// Longest request head the metrics endpoint reads.
const HEAD_BYTES: usize = 8 << 10;

/// How long a scrape may take to send its request, and to read the reply.
const DEADLINE: Duration = Duration::from_secs(5);

/// Scrapes served at once; past it, a new one takes the place of the
/// oldest whose request has not come in yet.
const CONNECTIONS: usize = 64;

/// Serves `GET /metrics` on `listener` until the task is dropped; anything
/// else is answered 404. The endpoint tells counts only (no session ids,
/// paths or commands), and is off unless the operator listens for it.
pub async fn serve_metrics(listener: TcpListener, registry: Arc<Registry>) {
    let gate = Gate::new(ConnectionLimits {
        max: CONNECTIONS,
        handshake: DEADLINE,
        per_session: 0,
    });
    let mut conns = incoming(listener, gate);
    while let Some(conn) = conns.next().await {
        tokio::spawn(answer(conn, Arc::clone(&registry)));
    }
}

async fn answer(mut conn: Guarded<tokio::net::TcpStream>, registry: Arc<Registry>) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    // The gate closes a connection whose request is not in by the
    // deadline; the timeout is the same bound, said where it is used.
    let read = tokio::time::timeout(DEADLINE, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < HEAD_BYTES {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    if !matches!(read, Ok(true)) {
        return;
    }
    // A whole request: this connection is answered, not taken over.
    conn.admission().vouch(None);
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let wanted = line.starts_with(b"GET /metrics ") || line.starts_with(b"GET /metrics?");
    let (status, body) = match (wanted, registry.encode_metrics()) {
        (true, Some(body)) => ("200 OK", body),
        _ => ("404 Not Found", "not found\n".to_string()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // A scraper that does not read its reply is dropped all the same.
    let _ = tokio::time::timeout(DEADLINE, async {
        let _ = conn.write_all(reply.as_bytes()).await;
        let _ = conn.shutdown().await;
    })
    .await;
}
