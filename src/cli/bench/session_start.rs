//! Session start: CreateSession until a first command ran, from the warm
//! pool and cold, against `docker run --rm`.

use std::time::{Duration, Instant};

use sandboxd::pb;

use super::{AnyError, Client, Row, close, docker_cli, ms, new_session, run_cmd, stats, verdict};

/// The session-start rows.
pub(super) async fn session_start(
    client: &Client,
    image: &str,
    project: &std::path::Path,
    n: usize,
    rows: &mut Vec<Row>,
) -> Result<(), AnyError> {
    eprintln!("session start ({n} samples each)...");
    let (mut ours, mut cold, mut run) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let s = new_session(client).await?;
        run_cmd(client, &s.session_id, "true").await?;
        ours.push(t.elapsed());
        close(client, s.session_id).await?;
        // Over an existing directory: no warm container fits, so it starts cold.
        let t = Instant::now();
        let s = client
            .clone()
            .create_session(pb::CreateSessionRequest {
                workspace_path: project.display().to_string(),
                ..Default::default()
            })
            .await?
            .into_inner();
        run_cmd(client, &s.session_id, "true").await?;
        cold.push(t.elapsed());
        close(client, s.session_id).await?;
        let t = Instant::now();
        let image = image.to_string();
        tokio::task::spawn_blocking(move || {
            docker_cli(&["run", "--rm", "--network", "none", &image, "true"])
        })
        .await??;
        run.push(t.elapsed());
    }
    let (o, r) = (stats(&ours), stats(&run));
    rows.push(Row {
        figure: "CreateSession until a first command ran (fresh workspace)".into(),
        ours: format!("{} / {} / {}", ms(o.p50), ms(o.p90), ms(o.p99)),
        baseline: format!(
            "docker run --rm {} / {} / {}",
            ms(r.p50),
            ms(r.p90),
            ms(r.p99)
        ),
        ratio: format!("{:.3}x", o.p50.as_secs_f64() / r.p50.as_secs_f64()),
        target: verdict(o.p50 <= Duration::from_millis(50), "p50 <= 50 ms"),
    });
    let c = stats(&cold);
    rows.push(Row {
        figure: "CreateSession until a first command ran (existing directory, cold)".into(),
        ours: format!("{} / {} / {}", ms(c.p50), ms(c.p90), ms(c.p99)),
        baseline: format!("docker run --rm {}", ms(r.p50)),
        ratio: format!("{:.3}x", c.p50.as_secs_f64() / r.p50.as_secs_f64()),
        target: "may start cold".into(),
    });
    Ok(())
}
