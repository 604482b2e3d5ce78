//! What a caller can make the service hold: a `sandboxd serve` of its own
//! (file tools only, so the figures are the service's, never this
//! process's) under three attacks, each from connections that never read
//! a reply (a zero flow-control window):
//! - a stranger without a token opens health Watch streams;
//! - a session's holder leaves ReadFile replies unread;
//! - a session's holder opens uploads that never send their archive.
//!
//! Each row gives the service's resident memory before the attack, at its
//! peak during it, and after its connections closed.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandboxd::pb;
use tonic::transport::{Channel, Endpoint};

use super::{AnyError, Row, verdict};

/// Connections of each attack.
const CONNECTIONS: usize = 4;
/// Calls each connection tries.
const CALLS: usize = 2000;
/// How long the calls are left hanging.
const HOLD: Duration = Duration::from_secs(8);
/// The bound every attack must keep the service within.
const BOUND_MIB: u64 = 64;

/// A `sandboxd serve` child: its address, its token, its pid.
struct Served {
    child: Child,
    addr: String,
    token: String,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// A service of its own; with `engine`, over the local engine (its
    /// sessions run processes), else file tools only.
    async fn start(engine: bool) -> Result<Served, AnyError> {
        let dir = tempfile::tempdir()?;
        let token = sandboxd::secret::random_hex();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, &token)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--pool-size", "0", "--lent-pool-size", "0"]);
        if !engine {
            cmd.args(["--docker-host", "unix:///nonexistent/sandboxd-bench.sock"]);
        }
        let child = cmd
            .arg("--token-file")
            .arg(&token_file)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args([
                "--service-name",
                &format!("sandboxd-bench-{}", &sandboxd::secret::random_hex()[..8]),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let served = Served {
            child,
            addr: format!("http://127.0.0.1:{port}"),
            token,
            _dir: dir,
        };
        let until = Instant::now() + Duration::from_secs(120);
        while served.operator().await.is_err() {
            if Instant::now() > until {
                return Err("the attacked service did not start".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(served)
    }

    /// The service's resident memory now, in MiB.
    fn rss_mib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(0, |kib| kib / 1024)
    }

    async fn operator(&self) -> Result<sandboxd::local::Client, AnyError> {
        let channel = Endpoint::from_shared(self.addr.clone())?.connect().await?;
        let bearer = sandboxd::local::Bearer::new(Some(&self.token)).ok_or("bad token")?;
        let mut client = sandboxd::local::client(channel, bearer);
        client
            .list_sessions(pb::ListSessionsRequest::default())
            .await?;
        Ok(client)
    }

    /// A connection that never reads a reply.
    async fn deaf(&self) -> Result<Channel, AnyError> {
        Ok(Endpoint::from_shared(self.addr.clone())?
            .initial_stream_window_size(0)
            .connect()
            .await?)
    }
}

/// What an attack left: memory before, at peak and after, and how its
/// calls were answered.
struct Outcome {
    before: u64,
    peak: u64,
    after: u64,
    refused: usize,
    hanging: usize,
}

/// Runs `calls` (each a future answering whether it was refused) for
/// [`HOLD`], sampling the service's memory, then drops them and their
/// connections and waits for the memory to come back.
async fn attack<F>(served: &Served, calls: Vec<F>) -> Outcome
where
    F: std::future::Future<Output = bool> + Send + 'static,
{
    let before = served.rss_mib();
    let tasks: Vec<_> = calls.into_iter().map(tokio::spawn).collect();
    let mut peak = before;
    let until = Instant::now() + HOLD;
    while Instant::now() < until {
        peak = peak.max(served.rss_mib());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut refused, mut hanging) = (0, 0);
    for task in tasks {
        if task.is_finished() {
            refused += usize::from(task.await.unwrap_or(false));
        } else {
            hanging += 1;
            task.abort();
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    Outcome {
        before,
        peak,
        after: served.rss_mib(),
        refused,
        hanging,
    }
}

fn row(what: String, o: &Outcome) -> Row {
    let grew = o
        .peak
        .saturating_sub(o.before)
        .max(o.after.saturating_sub(o.before));
    Row {
        figure: what,
        ours: format!(
            "peak +{} MiB, after +{} MiB ({} refused, {} left hanging)",
            o.peak.saturating_sub(o.before),
            o.after.saturating_sub(o.before),
            o.refused,
            o.hanging
        ),
        baseline: format!("service RSS before: {} MiB", o.before),
        ratio: format!("{:.2}x", o.peak as f64 / o.before.max(1) as f64),
        target: verdict(grew <= BOUND_MIB, &format!("<= {BOUND_MIB} MiB growth")),
    }
}

fn refused(e: &tonic::Status) -> bool {
    e.code() == tonic::Code::ResourceExhausted
}

/// The three attacks' rows.
pub(super) async fn figures(rows: &mut Vec<Row>) -> Result<(), AnyError> {
    eprintln!(
        "attacks on the service's memory ({CONNECTIONS} connections x {CALLS} calls each)..."
    );
    let served = Served::start(false).await?;
    let mut operator = served.operator().await?;
    let session = operator
        .create_session(pb::CreateSessionRequest::default())
        .await?
        .into_inner();
    operator
        .create_file(pb::CreateFileRequest {
            session_id: session.session_id.clone(),
            path: "big.txt".into(),
            content: "x".repeat(256 << 10),
        })
        .await?;

    // A stranger's Watch streams.
    let mut calls = Vec::new();
    for _ in 0..CONNECTIONS {
        let channel = served.deaf().await?;
        for _ in 0..CALLS {
            let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
            calls.push(async move {
                match health
                    .watch(tonic_health::pb::HealthCheckRequest::default())
                    .await
                {
                    Ok(stream) => {
                        // Held, never read.
                        let _held = stream;
                        std::future::pending::<bool>().await
                    }
                    Err(e) => refused(&e),
                }
            });
        }
    }
    let o = attack(&served, calls).await;
    rows.push(row(
        format!(
            "Attack: {} tokenless health Watch streams, never read",
            CONNECTIONS * CALLS
        ),
        &o,
    ));

    // A session's unread ReadFile replies (256 KiB each).
    let session_client = |channel: Channel| {
        let bearer = sandboxd::local::Bearer::new(Some(&session.session_token));
        sandboxd::local::client(channel, bearer.expect("a token"))
    };
    let mut calls = Vec::new();
    for _ in 0..CONNECTIONS {
        let client = session_client(served.deaf().await?);
        for _ in 0..CALLS {
            let mut client = client.clone();
            let req = pb::ReadFileRequest {
                session_id: session.session_id.clone(),
                path: "big.txt".into(),
                ..Default::default()
            };
            calls.push(async move {
                match client.read_file(req).await {
                    Ok(_) => false,
                    Err(e) => refused(&e),
                }
            });
        }
    }
    let o = attack(&served, calls).await;
    rows.push(row(
        format!(
            "Attack: {} ReadFile replies of 256 KiB left unread by a session",
            CONNECTIONS * CALLS
        ),
        &o,
    ));

    // A session's uploads that never send their archive.
    let mut calls = Vec::new();
    for _ in 0..CONNECTIONS {
        let client = session_client(served.deaf().await?);
        for _ in 0..CALLS {
            let mut client = client.clone();
            let header = pb::UploadArchiveRequest {
                part: Some(pb::upload_archive_request::Part::Header(
                    pb::UploadArchiveHeader {
                        session_id: session.session_id.clone(),
                        destination: String::new(),
                    },
                )),
            };
            let parts = futures_util::StreamExt::chain(
                futures_util::stream::iter([header]),
                futures_util::stream::pending(),
            );
            calls.push(async move {
                match client.upload_archive(parts).await {
                    Ok(_) => false,
                    Err(e) => refused(&e),
                }
            });
        }
    }
    let o = attack(&served, calls).await;
    rows.push(row(
        format!(
            "Attack: {} uploads by a session that never send their archive",
            CONNECTIONS * CALLS
        ),
        &o,
    ));
    drop(served);
    followers(rows).await
}

/// Unread follow streams of one process's output (ReadProcessOutput), a
/// thousand on one connection, from a service over the engine.
async fn followers(rows: &mut Vec<Row>) -> Result<(), AnyError> {
    const STREAMS: usize = 1000;
    let served = Served::start(true).await?;
    let mut operator = served.operator().await?;
    let session = operator
        .create_session(pb::CreateSessionRequest::default())
        .await?
        .into_inner();
    let process = operator
        .start_process(pb::StartProcessRequest {
            session_id: session.session_id.clone(),
            command: "head -c 4000000 /dev/zero | tr '\\0' x; sleep 600".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .process
        .ok_or("no process")?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bearer = sandboxd::local::Bearer::new(Some(&session.session_token)).ok_or("bad token")?;
    let client = sandboxd::local::client(served.deaf().await?, bearer);
    let calls: Vec<_> = (0..STREAMS)
        .map(|_| {
            let mut client = client.clone();
            let req = pb::ReadProcessOutputRequest {
                session_id: session.session_id.clone(),
                process_id: process.process_id.clone(),
                follow: true,
                ..Default::default()
            };
            async move {
                match client.read_process_output(req).await {
                    Ok(stream) => {
                        let _held = stream;
                        std::future::pending::<bool>().await
                    }
                    Err(e) => refused(&e),
                }
            }
        })
        .collect();
    let o = attack(&served, calls).await;
    rows.push(row(
        format!("Attack: {STREAMS} follow streams of a process's output, never read"),
        &o,
    ));
    operator
        .close_session(pb::CloseSessionRequest {
            session_id: session.session_id,
        })
        .await?;
    Ok(())
}
