//! Measures what idle connections held by another local process cost a
//! legitimate client: the latency of CreateSession and GetSession, each on
//! a fresh connection, and the service's CPU while the connections are
//! held.
//!
//! ```text
//! cargo build --release
//! cargo run --release --example idle_connections -- target/release/sandboxd [IDLE] [FD_LIMIT]
//! ```
//!
//! Starts `BINARY serve` on a free loopback port with a temporary state
//! directory, no container engine and its open files limit set to
//! FD_LIMIT (default 4096, so that IDLE, default 10000, passes it), then
//! alternates nothing held / IDLE held.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sandboxd::pb;
use sandboxd::pb::sandbox_client::SandboxClient;
use tokio::net::TcpStream;

type Error = Box<dyn std::error::Error + Send + Sync>;

const SAMPLES: usize = 10;
/// A call that takes longer is counted as this long (and as failed).
const CALL_CAP: Duration = Duration::from_secs(30);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let binary = PathBuf::from(
        args.next()
            .ok_or("usage: idle_connections BINARY [IDLE] [FD_LIMIT]")?,
    );
    let idle: usize = args.next().map_or(Ok(10_000), |a| a.parse())?;
    let fd_limit: u64 = args.next().map_or(Ok(4096), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let state = dir.path().join("state");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = std::process::Command::new(&binary);
    cmd.args([
        "serve",
        "--listen",
        &addr,
        "--pool-size",
        "0",
        "--service-name",
    ])
    .arg(format!("bench-idle-{}", std::process::id()))
    .arg("--state-dir")
    .arg(&state)
    .arg("--docker-host")
    .arg("unix:///nonexistent/bench-idle.sock")
    .env("RUST_LOG", "warn")
    .stderr(std::process::Stdio::null());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = rustix::process::Rlimit {
                current: Some(fd_limit),
                maximum: Some(fd_limit),
            };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, limit)?;
            // The service goes with this process, however it ends.
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let result = measure(&addr, &state, pid, idle).await;
    // SIGTERM: the service closes its sessions and removes its state.
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).ok_or("no pid")?,
        rustix::process::Signal::TERM,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    result
}

async fn measure(addr: &str, state: &std::path::Path, pid: u32, idle: usize) -> Result<(), Error> {
    let token_file = state.join("token");
    let started = Instant::now();
    let token = loop {
        if let Ok(t) = std::fs::read_to_string(&token_file)
            && !t.trim().is_empty()
            && TcpStream::connect(addr).await.is_ok()
        {
            break t.trim().to_string();
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err("the service did not start".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let session = call_create(addr, &token, false).await?;
    let quiet = sample(addr, &token, &session).await;
    // The strangers: connect as fast as they go, each given 2 s (a
    // service that stopped accepting leaves them in the kernel's queue).
    let t = Instant::now();
    // 256 at a time: connections the service never accepts wait out
    // their 2 s together.
    let held: Vec<TcpStream> = futures_util::stream::iter(0..idle)
        .map(|_| tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)))
        .buffer_unordered(256)
        .filter_map(|c| async move { c.ok().and_then(Result::ok) })
        .collect()
        .await;
    let opened = t.elapsed();
    let cpu0 = cpu_ticks(pid)?;
    let t = Instant::now();
    let flooded = sample(addr, &token, &session).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu = (cpu_ticks(pid)? - cpu0) as f64 / 100.0 / t.elapsed().as_secs_f64();
    let still_open = held.iter().filter(|c| open(c)).count();
    println!(
        "idle connections: {} of {idle} opened in {opened:.1?}; {still_open} still open at the end",
        held.len()
    );
    println!("service CPU while held: {:.0}% of one core", cpu * 100.0);
    quiet.print("nothing held");
    flooded.print(&format!("{} idle held", held.len()));
    drop(held);
    Ok(())
}

/// Whether the service still keeps `conn` open (a read would wait).
fn open(conn: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match conn.try_read(&mut buf) {
            Ok(0) => return false,
            // What the service sent before (its SETTINGS) is read past.
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

fn cpu_ticks(pid: u32) -> Result<u64, Error> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').ok_or("bad stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime: fields 14 and 15, the 12th and 13th after ")".
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

struct Samples {
    create: Vec<Duration>,
    get: Vec<Duration>,
    failed: usize,
}

impl Samples {
    fn print(&self, what: &str) {
        let p = |v: &[Duration], q: f64| {
            let mut v = v.to_vec();
            v.sort();
            v.get(((v.len() as f64 - 1.0) * q).round() as usize)
                .copied()
                .unwrap_or_default()
        };
        println!(
            "{what}: CreateSession p50 {:.1?} p90 {:.1?} max {:.1?}; GetSession p50 {:.1?} p90 {:.1?} max {:.1?}; {} of {} calls failed or passed {CALL_CAP:?}",
            p(&self.create, 0.5),
            p(&self.create, 0.9),
            p(&self.create, 1.0),
            p(&self.get, 0.5),
            p(&self.get, 0.9),
            p(&self.get, 1.0),
            self.failed,
            self.create.len() + self.get.len(),
        );
    }
}

/// SAMPLES of each call, each on a fresh connection (the time includes
/// connecting, as a client arriving now pays it).
async fn sample(addr: &str, token: &str, session: &str) -> Samples {
    let mut s = Samples {
        create: Vec::new(),
        get: Vec::new(),
        failed: 0,
    };
    for _ in 0..SAMPLES {
        let t = Instant::now();
        match tokio::time::timeout(CALL_CAP, call_create(addr, token, true)).await {
            Ok(Ok(_)) => s.create.push(t.elapsed()),
            _ => {
                s.create.push(t.elapsed().min(CALL_CAP));
                s.failed += 1;
            }
        }
        let t = Instant::now();
        match tokio::time::timeout(CALL_CAP, call_get(addr, token, session)).await {
            Ok(Ok(())) => s.get.push(t.elapsed()),
            _ => {
                s.get.push(t.elapsed().min(CALL_CAP));
                s.failed += 1;
            }
        }
    }
    s
}

async fn client(addr: &str) -> Result<SandboxClient<tonic::transport::Channel>, Error> {
    let channel = tonic::transport::Endpoint::try_from(format!("http://{addr}"))?
        .connect()
        .await?;
    Ok(SandboxClient::new(channel))
}

fn with<T>(token: &str, msg: T) -> Result<tonic::Request<T>, Error> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    Ok(req)
}

async fn call_create(addr: &str, token: &str, close: bool) -> Result<String, Error> {
    let mut c = client(addr).await?;
    let s = c
        .create_session(with(token, pb::CreateSessionRequest::default())?)
        .await?
        .into_inner();
    // Sessions made by the samples are closed again: the ceiling of open
    // sessions must not be what the figure measures.
    if close {
        let _ = c
            .close_session(with(
                token,
                pb::CloseSessionRequest {
                    session_id: s.session_id.clone(),
                },
            )?)
            .await;
    }
    Ok(s.session_id)
}

async fn call_get(addr: &str, token: &str, session: &str) -> Result<(), Error> {
    let mut c = client(addr).await?;
    c.get_session(with(
        token,
        pb::GetSessionRequest {
            session_id: session.to_string(),
        },
    )?)
    .await?;
    Ok(())
}
