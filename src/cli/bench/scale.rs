//! Many open sessions on one host (`--only scale`, not in the default
//! run: it opens 256 sessions): what each idle session costs in memory,
//! and whether starting a session and running a command slow down as more
//! sessions are open.

use std::time::{Duration, Instant};

use super::{AnyError, Client, QUIET, Row, close, ms, new_session, run_cmd, stats, verdict};

/// Open sessions the figures are taken at.
const LEVELS: [usize; 4] = [0, 64, 128, 256];
/// CreateSession samples at each level.
const CREATE_SAMPLES: usize = 15;
/// RunCommand samples at the first and last level.
const RUN_SAMPLES: usize = 60;

/// What one level measured.
struct Level {
    open: usize,
    create: Vec<Duration>,
}

/// The scale rows; `settle` waits for the warm pool to refill.
pub(super) async fn scale<F: std::future::Future<Output = ()>>(
    client: &Client,
    rows: &mut Vec<Row>,
    settle: impl Fn() -> F,
) -> Result<(), AnyError> {
    let most = LEVELS[LEVELS.len() - 1];
    eprintln!("scale (up to {most} open sessions)...");
    let probe = new_session(client).await?.session_id;
    settle().await;
    let run_at_zero = run_samples(client, &probe).await?;
    let (rss_before, avail_before) = (service_rss()?, host_available()?);
    let mut open: Vec<(String, String)> = Vec::new();
    let mut levels = Vec::new();
    let mut errors = 0usize;
    for &level in &LEVELS {
        while open.len() < level {
            match new_session(client).await {
                Ok(s) => open.push((s.session_id, s.container_id)),
                Err(e) => {
                    errors += 1;
                    eprintln!("  session {} failed: {e}", open.len());
                    if errors > 10 {
                        return Err(e);
                    }
                }
            }
            if open.len().is_multiple_of(32) {
                eprintln!("  {} open", open.len());
            }
        }
        let mut create = Vec::new();
        for _ in 0..CREATE_SAMPLES {
            settle().await;
            let t = Instant::now();
            match new_session(client).await {
                Ok(s) => {
                    create.push(t.elapsed());
                    close(client, s.session_id).await?;
                }
                Err(_) => errors += 1,
            }
        }
        levels.push(Level {
            open: level,
            create,
        });
    }
    settle().await;
    // Idle: let the last starts' work finish before memory is read.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (rss_after, avail_after) = (service_rss()?, host_available()?);
    let cgroups: Vec<u64> = open.iter().filter_map(|(_, c)| cgroup_memory(c)).collect();
    let run_at_most = run_samples(client, &probe).await?;
    for (sid, _) in open {
        close(client, sid).await?;
    }
    close(client, probe).await?;

    let n = most as f64;
    let mib = |b: f64| b / f64::from(1 << 20);
    let service = mib(rss_after.saturating_sub(rss_before) as f64) / n;
    let host = mib(avail_before.saturating_sub(avail_after) as f64) / n;
    let cgroup = if cgroups.is_empty() {
        None
    } else {
        Some(mib(cgroups.iter().sum::<u64>() as f64) / cgroups.len() as f64)
    };
    rows.push(Row {
        figure: format!("{most} idle sessions: memory per session"),
        ours: format!(
            "service {service:.2} MiB; container (its cgroup: init, supervisor) {}; whole host {host:.2} MiB",
            cgroup.map_or("unknown".into(), |c| format!("{c:.2} MiB"))
        ),
        baseline: "the host's available memory before the sessions opened".into(),
        ratio: String::new(),
        target: verdict(host <= 8.0, "<= 8 MiB per idle session in all (whole host)"),
    });
    let base = stats(&levels[0].create);
    for level in &levels {
        let s = stats(&level.create);
        rows.push(Row {
            figure: format!(
                "CreateSession with {} sessions open (p50 / p99)",
                level.open
            ),
            ours: format!("{} / {}", ms(s.p50), ms(s.p99)),
            baseline: format!("0 open {} / {}", ms(base.p50), ms(base.p99)),
            ratio: format!("{:.2}x", s.p50.as_secs_f64() / base.p50.as_secs_f64()),
            target: if level.open == most {
                verdict(
                    s.p50.as_secs_f64() <= 1.5 * base.p50.as_secs_f64() && errors == 0,
                    "p50 <= 1.5x the 0-open p50, 0 errors",
                )
            } else {
                String::new()
            },
        });
    }
    let (r0, rn) = (stats(&run_at_zero), stats(&run_at_most));
    rows.push(Row {
        figure: format!("RunCommand `true` with {most} sessions open (p50 / p99)"),
        ours: format!("{} / {}", ms(rn.p50), ms(rn.p99)),
        baseline: format!("0 open {} / {}", ms(r0.p50), ms(r0.p99)),
        ratio: format!("{:.2}x", rn.p50.as_secs_f64() / r0.p50.as_secs_f64()),
        target: verdict(
            rn.p50.as_secs_f64() <= 1.5 * r0.p50.as_secs_f64(),
            "p50 <= 1.5x the 0-open p50",
        ),
    });
    Ok(())
}

/// RunCommand `true` samples in session `sid`, each after the same pause
/// as the round-trip row.
async fn run_samples(client: &Client, sid: &str) -> Result<Vec<Duration>, AnyError> {
    let mut out = Vec::new();
    for _ in 0..RUN_SAMPLES {
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        run_cmd(client, sid, "true").await?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// This process's resident memory (the service runs in it), in bytes.
fn service_rss() -> Result<u64, AnyError> {
    field_kib("/proc/self/status", "VmRSS:")
}

/// The host's available memory, in bytes.
fn host_available() -> Result<u64, AnyError> {
    field_kib("/proc/meminfo", "MemAvailable:")
}

fn field_kib(file: &str, key: &str) -> Result<u64, AnyError> {
    let text = std::fs::read_to_string(file)?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no {key} in {file}"))?;
    Ok(kib * 1024)
}

/// Memory the container's cgroup charges (its processes and the page
/// cache they use), where the host's cgroups can be read.
fn cgroup_memory(container: &str) -> Option<u64> {
    [
        format!("/sys/fs/cgroup/memory/docker/{container}/memory.usage_in_bytes"),
        format!("/sys/fs/cgroup/docker/{container}/memory.current"),
        format!("/sys/fs/cgroup/system.slice/docker-{container}.scope/memory.current"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse().ok())
}
