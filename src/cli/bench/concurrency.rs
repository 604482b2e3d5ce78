//! Many sessions running commands at once.

use std::time::Instant;

use super::{AnyError, Client, Row, close, ms, new_session, run_cmd, stats, verdict};

/// The concurrency row; `settle` waits for the warm pool to refill.
pub(super) async fn concurrency<F: std::future::Future<Output = ()>>(
    client: &Client,
    rows: &mut Vec<Row>,
    settle: impl Fn() -> F,
) -> Result<(), AnyError> {
    const SESSIONS: usize = 64;
    const COMMANDS: usize = 50;
    eprintln!("concurrency ({SESSIONS} sessions x {COMMANDS} commands)...");
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(new_session(client).await?.session_id);
    }
    settle().await;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for sid in &sessions {
        let (client, sid) = (client.clone(), sid.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0usize;
            for _ in 0..COMMANDS {
                let t = Instant::now();
                match run_cmd(&client, &sid, "true").await {
                    Ok(exit) if exit.exit_code == 0 => lat.push(t.elapsed()),
                    _ => errors += 1,
                }
            }
            (lat, errors)
        }));
    }
    let (mut all, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (lat, e) = task.await?;
        all.extend(lat);
        errors += e;
    }
    let wall = t.elapsed();
    for sid in sessions {
        close(client, sid).await?;
    }
    let s = stats(&all);
    rows.push(Row {
        figure: format!("{SESSIONS} sessions x {COMMANDS} `true` at once"),
        ours: format!(
            "{:.0} commands/s, p50 {} p99 {}, {errors} errors",
            (SESSIONS * COMMANDS) as f64 / wall.as_secs_f64(),
            ms(s.p50),
            ms(s.p99)
        ),
        baseline: String::new(),
        ratio: format!("p99/p50 {:.1}", s.p99.as_secs_f64() / s.p50.as_secs_f64()),
        target: verdict(errors == 0 && s.p99 <= s.p50 * 5, "0 errors, p99 <= 5x p50"),
    });
    Ok(())
}
