//! The output flood: a gigabyte to stdout, its drain rate against
//! `docker exec` and the service's memory growth while it drains.

use std::time::{Duration, Instant};

use super::{AnyError, Client, Row, close, docker_cli, new_session, run_cmd, stats, verdict};

/// The process's peak resident memory.
pub(super) fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The flood rows; `settle` waits for the warm pool to refill.
pub(super) async fn flood<F: std::future::Future<Output = ()>>(
    client: &Client,
    bytes: u64,
    rows: &mut Vec<Row>,
    settle: impl Fn() -> F,
) -> Result<(), AnyError> {
    eprintln!("output flood ({} MiB, 3 samples each)...", bytes >> 20);
    let session = new_session(client).await?;
    // The session came from the pool: let it refill before measuring.
    settle().await;
    let container = session.container_id.clone();
    let command = format!("head -c {bytes} /dev/zero");
    let before = peak_rss_kib();
    let (mut ours, mut cli) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        let exit = run_cmd(client, &session.session_id, &command).await?;
        ours.push(t.elapsed());
        let total = exit.stdout.map_or(0, |s| s.total_bytes);
        if total != bytes {
            return Err(format!("flood drained {total} of {bytes} bytes").into());
        }
        let (c, cmd) = (container.clone(), command.clone());
        let t = Instant::now();
        tokio::task::spawn_blocking(move || docker_cli(&["exec", &c, "sh", "-c", &cmd])).await??;
        cli.push(t.elapsed());
    }
    let growth = peak_rss_kib().saturating_sub(before) / 1024;
    let rate = |d: Duration| bytes as f64 / (1 << 20) as f64 / d.as_secs_f64();
    let (o, c) = (rate(stats(&ours).p50), rate(stats(&cli).p50));
    rows.push(Row {
        figure: format!("Output flood, {} MiB to stdout: drain rate", bytes >> 20),
        ours: format!("{o:.0} MB/s"),
        baseline: format!("docker exec > /dev/null {c:.0} MB/s"),
        ratio: format!("{:.2}x", o / c),
        target: verdict(o >= 0.8 * c, ">= 0.8x docker exec"),
    });
    rows.push(Row {
        figure: "Output flood: service peak RSS growth".into(),
        ours: format!("{growth} MiB"),
        baseline: String::new(),
        ratio: String::new(),
        target: verdict(growth <= 16, "<= 16 MiB"),
    });
    close(client, session.session_id).await?;
    Ok(())
}
