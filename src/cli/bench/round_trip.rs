//! The command round trip: RunCommand `true` in a warm session against a
//! raw Engine API exec and the `docker exec` CLI, alternating.

use std::time::{Duration, Instant};

use sandboxd::sandbox::docker::DockerRuntime;

use super::{
    AnyError, Client, QUIET, Row, close, docker_cli, ms, new_session, run_cmd, stats, verdict,
};

/// The round-trip rows.
pub(super) async fn round_trip(
    client: &Client,
    docker: &DockerRuntime,
    n: usize,
    rows: &mut Vec<Row>,
) -> Result<(), AnyError> {
    eprintln!("command round trip ({n} samples each)...");
    let session = new_session(client).await?;
    let container = session.container_id.clone();
    for _ in 0..5 {
        run_cmd(client, &session.session_id, "true").await?;
        docker.raw_exec(&container, &["true"]).await?;
    }
    let (mut ours, mut raw, mut cli) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        // Every sample, ours and the baselines' alike, starts on a quiet
        // machine: Docker finishes an exec's bookkeeping after it returns,
        // and that work would land on whichever sample comes next.
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        run_cmd(client, &session.session_id, "true").await?;
        ours.push(t.elapsed());
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        docker.raw_exec(&container, &["true"]).await?;
        raw.push(t.elapsed());
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        let c = container.clone();
        tokio::task::spawn_blocking(move || docker_cli(&["exec", &c, "true"])).await??;
        cli.push(t.elapsed());
    }
    let (o, r, c) = (stats(&ours), stats(&raw), stats(&cli));
    let ratio = o.p50.as_secs_f64() / r.p50.as_secs_f64();
    rows.push(Row {
        figure: "RunCommand `true`, warm session (p50 / p90 / p99)".into(),
        ours: format!("{} / {} / {}", ms(o.p50), ms(o.p90), ms(o.p99)),
        baseline: format!(
            "raw Engine API exec {} / {} / {}",
            ms(r.p50),
            ms(r.p90),
            ms(r.p99)
        ),
        ratio: format!("{ratio:.3}x"),
        target: verdict(
            o.p50 <= Duration::from_millis(3) && ratio <= 0.06,
            "p50 <= 3 ms and <= 0.06x raw exec",
        ),
    });
    rows.push(Row {
        figure: "RunCommand `true` vs `docker exec` CLI".into(),
        ours: ms(o.p50),
        baseline: format!("docker exec {} / {} / {}", ms(c.p50), ms(c.p90), ms(c.p99)),
        ratio: format!("{:.3}x", o.p50.as_secs_f64() / c.p50.as_secs_f64()),
        target: String::new(),
    });
    close(client, session.session_id).await?;
    Ok(())
}
