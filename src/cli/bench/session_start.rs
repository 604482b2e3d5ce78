//! Session start: CreateSession until a first command ran, from the warm
//! pool and cold, against `docker run --rm`.

use std::time::{Duration, Instant};

use sandboxd::pb;

use super::{
    AnyError, Client, QUIET, Row, Section, close, docker_cli, ms, new_session, run_cmd, stats,
    verdict,
};

/// Limits other than the default: no warm container has them.
const OFF_DEFAULT: pb::Limits = pb::Limits {
    memory_bytes: sandboxd::session::defaults::MEMORY_BYTES + (1 << 20),
    nano_cpus: 0,
    pids: 0,
    disk_bytes: 0,
    inodes: 0,
};

/// The session-start rows, and where a start over an existing directory
/// goes. `settle` waits for the warm pool to be full again.
pub(super) async fn session_start<F: Future<Output = ()>>(
    client: &Client,
    image: &str,
    project: &std::path::Path,
    n: usize,
    rows: &mut Vec<Row>,
    sections: &mut Vec<Section>,
    settle: impl Fn() -> F,
) -> Result<(), AnyError> {
    eprintln!("session start ({n} samples each)...");
    let (mut ours, mut cold, mut run) = (Vec::new(), Vec::new(), Vec::new());
    let (mut first, mut second, mut closing) = (Vec::new(), Vec::new(), Vec::new());
    let (mut profiles, mut cold_profiles) = (Vec::new(), Vec::new());
    let (mut lent, mut lent_profiles) = (Vec::new(), Vec::new());
    let mut second_profiles = Vec::new();
    for _ in 0..n {
        // Each start begins on a quiet machine, as the round trip's
        // samples do: the engine goes on removing the `docker run --rm`
        // container after the CLI returned.
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        let s = new_session(client).await?;
        let t1 = Instant::now();
        sandboxd::profile::record(true);
        sandboxd::profile::mark("client: call sent");
        run_cmd(client, &s.session_id, "true").await?;
        sandboxd::profile::mark("client: exit received");
        sandboxd::profile::record(false);
        profiles.push(sandboxd::profile::take());
        first.push(t1.elapsed());
        ours.push(t.elapsed());
        let t = Instant::now();
        sandboxd::profile::record(true);
        sandboxd::profile::mark("client: call sent");
        run_cmd(client, &s.session_id, "true").await?;
        sandboxd::profile::mark("client: exit received");
        sandboxd::profile::record(false);
        second_profiles.push(sandboxd::profile::take());
        second.push(t.elapsed());
        let t = Instant::now();
        close(client, s.session_id).await?;
        closing.push(t.elapsed());
        // Over an existing directory: a warm container lent it, with the
        // marks of its path taken; then one that no warm container fits
        // (other limits than the default), which starts cold. Each once
        // the refills before it are done.
        for (limits, times, marks) in [
            (None, &mut lent, &mut lent_profiles),
            (Some(OFF_DEFAULT), &mut cold, &mut cold_profiles),
        ] {
            settle().await;
            tokio::time::sleep(QUIET).await;
            let t = Instant::now();
            sandboxd::profile::record(true);
            sandboxd::profile::mark("client: call sent");
            let s = client
                .clone()
                .create_session(pb::CreateSessionRequest {
                    workspace_path: project.display().to_string(),
                    limits,
                    ..Default::default()
                })
                .await?
                .into_inner();
            sandboxd::profile::mark("client: session received");
            sandboxd::profile::record(false);
            marks.push(sandboxd::profile::take());
            run_cmd(client, &s.session_id, "true").await?;
            times.push(t.elapsed());
            close(client, s.session_id).await?;
        }
        tokio::time::sleep(QUIET).await;
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
    eprintln!(
        "where a fresh session's first command's time goes:\n{}",
        super::round_trip::stage_table(&profiles)
    );
    eprintln!(
        "and its second command's:\n{}",
        super::round_trip::stage_table(&second_profiles)
    );
    let (f, s) = (stats(&first), stats(&second));
    let ratio = f.p50.as_secs_f64() / s.p50.as_secs_f64();
    rows.push(Row {
        figure: "A fresh session's first RunCommand `true`, against its second".into(),
        ours: format!("{} / {} / {}", ms(f.p50), ms(f.p90), ms(f.p99)),
        baseline: format!("second {} / {} / {}", ms(s.p50), ms(s.p90), ms(s.p99)),
        ratio: format!("{ratio:.2}x"),
        target: verdict(ratio <= 1.2, "first p50 <= 1.2x the second's"),
    });
    let cl = stats(&closing);
    rows.push(Row {
        figure: "CloseSession, after two commands".into(),
        ours: format!("{} / {} / {}", ms(cl.p50), ms(cl.p90), ms(cl.p99)),
        baseline: String::new(),
        ratio: String::new(),
        target: verdict(cl.p50 <= Duration::from_millis(20), "p50 <= 20 ms"),
    });
    let l = stats(&lent);
    rows.push(Row {
        figure:
            "CreateSession until a first command ran (existing directory, a warm container lent it)"
                .into(),
        ours: format!("{} / {} / {}", ms(l.p50), ms(l.p90), ms(l.p99)),
        baseline: format!("docker run --rm {}", ms(r.p50)),
        ratio: format!("{:.3}x", l.p50.as_secs_f64() / r.p50.as_secs_f64()),
        target: verdict(l.p50 <= Duration::from_millis(50), "p50 <= 50 ms"),
    });
    let c = stats(&cold);
    rows.push(Row {
        figure: "CreateSession until a first command ran (existing directory, cold: limits no warm container has)".into(),
        ours: format!("{} / {} / {}", ms(c.p50), ms(c.p90), ms(c.p99)),
        baseline: format!("docker run --rm {}", ms(r.p50)),
        ratio: format!("{:.3}x", c.p50.as_secs_f64() / r.p50.as_secs_f64()),
        target: "for reference".into(),
    });
    sections.push(Section {
        heading: "Where a session over an existing directory starts".into(),
        body: format!(
            "CreateSession over an existing directory, from the client's send to \
             its receipt of the answer: marks taken along the path in the service. \
             From a warm container (the directory opened, checked and pinned on the \
             container's slot, the supervisor's confirmation, the session recorded):\n\n{}\n\n\
             Cold, when no warm container fits (the directory opened and pinned, the \
             session recorded, the container created and started by the engine, the \
             supervisor linked and its first spawn warmed):\n\n{}\n\n\
             Regenerated by `sandboxd bench --only session-start`.",
            super::round_trip::stage_table(&lent_profiles),
            super::round_trip::stage_table(&cold_profiles)
        ),
    });
    Ok(())
}
