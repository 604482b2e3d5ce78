//! Under gVisor: RunCommand `true` in a warm session of a second service
//! whose containers run under runsc, against the spawn floor measured the
//! same way inside that session's own runsc container (and GetSession).
//! Opt-in: it installs runsc and registers it with the engine, as `serve
//! --container-runtime runsc` does; where that cannot be done it says why
//! and adds no row.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::sandbox::runsc;

use super::round_trip::{
    get_session, median, spawn_floor, stage_table, stage_table_from, timed_run,
};
use super::{AnyError, Client, QUIET, Row, Section, ms, new_session, run_cmd, stats, verdict};

/// The gVisor row.
pub(super) async fn figure(
    docker: &DockerRuntime,
    n: usize,
    rows: &mut Vec<Row>,
    sections: &mut Vec<Section>,
) -> Result<(), AnyError> {
    eprintln!("gVisor: runsc as a runtime of the engine...");
    if let Err(e) = runsc::ensure_registered(docker).await {
        eprintln!("gVisor: skipped, runsc cannot be used here: {e}");
        return Ok(());
    }
    let local = sandboxd::local::Local::start("bench-gvisor", 1, |c| {
        c.sandbox.runtime = Some(runsc::NAME.into());
    })
    .await?;
    let measured = measure(&local.client, n).await;
    local.stop().await?;
    let (row, section) = measured?;
    rows.push(row);
    sections.push(section);
    Ok(())
}

async fn measure(client: &Client, n: usize) -> Result<(Row, Section), AnyError> {
    eprintln!("gVisor: command round trip ({n} samples each)...");
    let sid = new_session(client).await?.session_id;
    for _ in 0..5 {
        run_cmd(client, &sid, "true").await?;
        get_session(client, &sid).await?;
    }
    let mut floor = spawn_floor(client, &sid).await?;
    let (mut ours, mut unary, mut profiles) = (vec![], vec![], vec![]);
    for i in 0..n {
        tokio::time::sleep(QUIET).await;
        timed_run(client, &sid, i % 2 == 1, &mut ours, &mut profiles).await?;
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        get_session(client, &sid).await?;
        unary.push(t.elapsed());
    }
    floor.extend(spawn_floor(client, &sid).await?);
    super::close(client, sid).await?;
    let floor = median(&mut floor);
    let (o, u) = (stats(&ours), stats(&unary));
    let section = breakdown(&profiles, o.p50, floor);
    let ratio = o.p50.as_secs_f64() / floor.as_secs_f64();
    let row = Row {
        figure: "Under gVisor: RunCommand `true`, warm session (p50 / p90 / p99)".into(),
        ours: format!("{} / {} / {}", ms(o.p50), ms(o.p90), ms(o.p99)),
        baseline: format!(
            "spawn floor in the session's runsc container {}; GetSession {}",
            ms(floor),
            ms(u.p50)
        ),
        ratio: format!("{ratio:.2}x the floor"),
        target: verdict(ratio <= 1.5, "p50 <= 1.5x the runsc spawn floor"),
    };
    Ok((row, section))
}

/// Where a RunCommand's time goes under gVisor: the service's stages from
/// the client's send, and the supervisor's from its spawn frame decoded
/// (gVisor's kernel keeps a clock of its own, so the two are not on one
/// line).
fn breakdown(profiles: &[Vec<(&'static str, u64)>], ours: Duration, floor: Duration) -> Section {
    let split = |inside: bool| -> Vec<Vec<(&'static str, u64)>> {
        profiles
            .iter()
            .map(|marks| {
                marks
                    .iter()
                    .filter(|m| m.0.starts_with("supervisor: ") == inside)
                    .copied()
                    .collect()
            })
            .collect()
    };
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Measured with the gVisor row, by `sandboxd bench --only gvisor`: every other sample \
         records named marks, as in the round-trip breakdown ({} samples; RunCommand p50 {}, \
         spawn floor {}). The supervisor runs on gVisor's own clock, so its stages are timed from \
         its spawn frame decoded, apart from the service's; its whole share is the service's \
         step to \"host: exit frame decoded\".\n",
        profiles.len(),
        ms(ours),
        ms(floor),
    );
    body.push_str("The service:\n\n");
    body.push_str(&stage_table(&split(false)));
    body.push_str("\nThe supervisor, in the runsc container:\n\n");
    body.push_str(&stage_table_from(
        &split(true),
        "supervisor: spawn frame decoded",
    ));
    Section {
        heading: "Where a RunCommand's time goes under gVisor".into(),
        body,
    }
}
