//! The cost of the web view to the commands it shows: RunCommand `true` in
//! a warm session with no page watching, and with one page watching it
//! live (see [`super::page`]), in alternating blocks of the same run.
//!
//! The session runs a periodic printer throughout, on both sides, so
//! output flows through the session's watch all along; with the page open
//! its live stream follows the printer (every piece broadcast, rendered
//! and sent) and its timeline is fetched every two seconds, while the
//! `true` commands beside it are timed. Blocks go A B B A (no page, page,
//! page, no page) so that a drift of the machine over the run falls on
//! both sides alike.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sandboxd::pb;
use sandboxd::server::Access;
use sandboxd::session::{Caller, Registry, defaults};

use super::page::{POLL, Page, Seen};
use super::{AnyError, Client, QUIET, Row, close, ms, new_session, run_cmd, stats, verdict};

/// How long each block of samples lasts: one of the page's timeline
/// fetches falls in each block it is open, in its middle, so the page
/// fetches as often as live.js does. Short blocks, many of them, so that
/// a burst of the machine's other work falls on both sides alike.
const BLOCK: Duration = Duration::from_secs(2);
/// Pause after a page opens or closes, before the block's samples.
const SETTLE: Duration = Duration::from_millis(300);
/// The command the page follows, printing five times a second.
const PRINTER: &str = "while :; do echo tick; sleep 0.2; done";
/// Longest the figure waits for the printer to start or stop.
const WAIT: Duration = Duration::from_secs(30);

/// The web view row: at least `n` samples each side.
pub(super) async fn figure(
    client: &Client,
    registry: &Arc<Registry>,
    n: usize,
    rows: &mut Vec<Row>,
) -> Result<(), AnyError> {
    eprintln!(
        "web view: RunCommand `true` with no page watching vs one page live ({n}+ samples each)..."
    );
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    // No token: every viewer is the operator, as on a loopback address.
    let web = tokio::spawn({
        let registry = Arc::clone(registry);
        async move { sandboxd::server::serve_web(listener, registry, &Access::default()).await }
    });
    let sid = new_session(client).await?.session_id;
    let printer = tokio::spawn(hold(client.clone(), sid.clone()));
    let seen = Arc::new(Seen::default());
    let result = async {
        let seq = printing(registry, &sid).await?;
        measure(client, addr, &sid, seq, n, &seen).await
    }
    .await;
    // Dropping the printer's call cancels it; the session closes after.
    printer.abort();
    let _ = printer.await;
    let stopped = stopped(registry, &sid).await;
    web.abort();
    close(client, sid).await?;
    let Measured {
        without,
        with,
        cpu_per_s,
    } = result?;
    stopped?;

    let (a, b) = (stats(&without), stats(&with));
    let ratio = b.p50.as_secs_f64() / a.p50.as_secs_f64();
    let (polls, failed, events) = (
        seen.polls.load(Ordering::Relaxed),
        seen.failed.load(Ordering::Relaxed),
        seen.events.load(Ordering::Relaxed),
    );
    eprintln!(
        "  no page: p50 {} ({} samples); one page live: p50 {} ({} samples); with/without {ratio:.3}x",
        ms(a.p50),
        without.len(),
        ms(b.p50),
        with.len(),
    );
    eprintln!(
        "  the page: {polls} timeline fetches ({failed} failed, the last {} bytes, the slowest {:.1} ms), \
         {events} output events streamed",
        seen.timeline_bytes.load(Ordering::Relaxed),
        seen.slowest_us.load(Ordering::Relaxed) as f64 / 1000.0,
    );
    eprintln!(
        "  CPU of this process (the service, the bench's clients, the page's own client): \
         {:.1} ms per second with no page, {:.1} ms per second with the page ({:+.1})",
        cpu_per_s[0] * 1000.0,
        cpu_per_s[1] * 1000.0,
        (cpu_per_s[1] - cpu_per_s[0]) * 1000.0,
    );
    let met = ratio <= 1.02 && failed == 0;
    eprintln!(
        "  {}",
        verdict(met, "with/without <= 1.02 (the web view adds under 2%)")
    );
    rows.push(Row {
        figure: "RunCommand `true`, warm session, with one web page watching it live".into(),
        ours: format!("{} / {} / {}", ms(b.p50), ms(b.p90), ms(b.p99)),
        baseline: format!(
            "no page (same run) {} / {} / {}",
            ms(a.p50),
            ms(a.p90),
            ms(a.p99)
        ),
        ratio: format!("{ratio:.3}x"),
        target: verdict(met, "p50 within 2% of no page"),
    });
    Ok(())
}

/// Alternating blocks, A B B A, until each side has `n` samples: the
/// first side without a page, the second with one open.
async fn measure(
    client: &Client,
    addr: SocketAddr,
    sid: &str,
    seq: u64,
    n: usize,
    seen: &Arc<Seen>,
) -> Result<Measured, AnyError> {
    for _ in 0..5 {
        run_cmd(client, sid, "true").await?;
    }
    let mut sides = [Vec::new(), Vec::new()];
    let (mut cpu, mut wall) = ([Duration::ZERO; 2], [Duration::ZERO; 2]);
    let mut medians = Vec::new();
    let mut block = 0usize;
    while sides.iter().any(|s| s.len() < n) || !block.is_multiple_of(4) {
        let watched = matches!(block % 4, 1 | 2);
        let page = match watched {
            true => Some(Page::open(addr, sid, seq, SETTLE + POLL / 2, seen).await?),
            false => None,
        };
        let events = seen.events.load(Ordering::Relaxed);
        tokio::time::sleep(SETTLE).await;
        let (start, cpu_start) = (Instant::now(), process_cpu());
        let until = start + BLOCK;
        let from = sides[usize::from(watched)].len();
        while Instant::now() < until {
            tokio::time::sleep(QUIET).await;
            let t = Instant::now();
            let exit = run_cmd(client, sid, "true").await?;
            sides[usize::from(watched)].push(t.elapsed());
            if exit.exit_code != 0 {
                return Err(format!("`true` exited {}", exit.exit_code).into());
            }
        }
        cpu[usize::from(watched)] += process_cpu().saturating_sub(cpu_start);
        wall[usize::from(watched)] += start.elapsed();
        if watched && seen.events.load(Ordering::Relaxed) == events {
            return Err("the page's live stream delivered no output in a block".into());
        }
        drop(page);
        let p50 = stats(&sides[usize::from(watched)][from..]).p50;
        medians.push(format!(
            "{}{:.2}",
            if watched { "B " } else { "A " },
            ms_f(p50)
        ));
        block += 1;
    }
    eprintln!(
        "  p50 of each block (A: no page, B: page): {}",
        medians.join(", ")
    );
    // The last page's close settles before the session is closed.
    tokio::time::sleep(SETTLE).await;
    let [without, with] = sides;
    Ok(Measured {
        without,
        with,
        cpu_per_s: [0, 1].map(|i| cpu[i].as_secs_f64() / wall[i].as_secs_f64().max(1e-9)),
    })
}

/// What the blocks measured, each side.
struct Measured {
    /// The samples with no page.
    without: Vec<Duration>,
    /// The samples with the page open.
    with: Vec<Duration>,
    /// CPU seconds this process spent per second of the blocks, without
    /// the page and with it (the service, and the page's own client).
    cpu_per_s: [f64; 2],
}

fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// CPU time this process has used, all its threads.
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Runs the printer in session `sid` until this task is aborted.
async fn hold(client: Client, sid: String) -> Result<(), AnyError> {
    let mut events = client
        .clone()
        .run_command(pb::RunCommandRequest {
            session_id: sid,
            command: PRINTER.to_string(),
            timeout_ms: defaults::MAX_TIMEOUT_MS,
            ..Default::default()
        })
        .await?
        .into_inner();
    while events.message().await?.is_some() {}
    Ok(())
}

/// The printer's sequence number, once it runs.
async fn printing(registry: &Registry, sid: &str) -> Result<u64, AnyError> {
    let until = Instant::now() + WAIT;
    while Instant::now() < until {
        let session = registry.observe(&Caller::Admin, sid)?;
        if let Some((seq, _)) = session
            .watch
            .running()
            .into_iter()
            .find(|(_, c)| c == PRINTER)
        {
            return Ok(seq);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("the printer did not start".into())
}

/// Waits until nothing runs in session `sid` any more.
async fn stopped(registry: &Registry, sid: &str) -> Result<(), AnyError> {
    let until = Instant::now() + WAIT;
    while Instant::now() < until {
        if registry
            .observe(&Caller::Admin, sid)?
            .watch
            .running()
            .is_empty()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("the printer was not stopped when its call was dropped".into())
}
