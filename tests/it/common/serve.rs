//! A `sandboxd serve` a test starts on a loopback port the service picks
//! itself (`--listen 127.0.0.1:0`). A port found free beforehand can be taken
//! by another test, or by one of the many connections the tests open, before
//! the service binds it; a client of that test would then reach whatever
//! took it. The address comes from the service's own "sandboxd listening"
//! line instead.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a service may take to listen: it binds before any image build,
/// but logs the line after the startup sweep and the image check.
const LISTENING_WITHIN: Duration = Duration::from_secs(300);

/// Spawns `command`, a `sandboxd serve` given `--listen 127.0.0.1:0`, and
/// waits for the address it listens on.
pub fn spawn_listening(command: &mut Command) -> (Child, SocketAddr) {
    let (child, addrs) = spawn_logging(command, &["sandboxd listening"]);
    (child, addrs[0])
}

/// Spawns `command`, a `sandboxd serve`, and waits for a log line holding
/// each of `lines` in turn: the `addr=` of each. Its stderr is read to the
/// end on a thread of its own (so the service never blocks on a full pipe);
/// if the service exits or stays silent first, the test fails with what it
/// wrote.
pub fn spawn_logging(command: &mut Command, lines: &[&'static str]) -> (Child, Vec<SocketAddr>) {
    let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted: Vec<&'static str> = lines.to_vec();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut said = String::new();
        let mut raw = Vec::new();
        let mut addrs = Vec::new();
        let mut wanted = wanted.into_iter();
        let mut next = wanted.next();
        while let Some(want) = next
            && reader.read_until(b'\n', &mut raw).is_ok_and(|n| n > 0)
        {
            let line = String::from_utf8_lossy(&raw);
            said.push_str(&line);
            if let Some(addr) = logged_addr(&line, want) {
                addrs.push(addr);
                next = wanted.next();
            }
            raw.clear();
        }
        let _ = tx.send(if next.is_none() { Ok(addrs) } else { Err(said) });
        // The rest is read (and dropped) so the service never blocks
        // writing its log.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    match rx.recv_timeout(LISTENING_WITHIN) {
        Ok(Ok(addrs)) => (child, addrs),
        Ok(Err(said)) => {
            let status = child.wait().unwrap();
            panic!("sandboxd serve exited ({status}) before it logged {lines:?}:\n{said}")
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sandboxd serve did not log {lines:?} within {LISTENING_WITHIN:?}")
        }
    }
}

/// The address (`addr=...`) of a log line holding `message`.
fn logged_addr(line: &str, message: &str) -> Option<SocketAddr> {
    if !line.contains(message) {
        return None;
    }
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("addr="))
        .and_then(|addr| addr.parse().ok())
}

/// Waits for the "sandboxd listening" line in the log file a `serve` given
/// `--listen 127.0.0.1:0` writes (plain or JSON), and the address on it.
pub async fn listening_in(log: &std::path::Path) -> SocketAddr {
    let deadline = std::time::Instant::now() + LISTENING_WITHIN;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(addr) = text.lines().find_map(|line| {
            let line = line.replace("\"addr\":\"", " addr=").replace('"', " ");
            logged_addr(&line, "sandboxd listening")
        }) {
            return addr;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sandboxd serve did not listen:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
