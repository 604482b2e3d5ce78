//! Under gVisor: RunCommand `true` in a warm session of a second service
//! whose containers run under runsc, against the spawn floor measured the
//! same way inside that session's own runsc container (and GetSession).
//! Opt-in: it installs runsc and registers it with the engine, as `serve
//! --container-runtime runsc` does; where that cannot be done it says why
//! and adds no row.

use std::time::Instant;

use sandboxd::profile;
use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::sandbox::runsc;

use super::round_trip::{get_session, median, spawn_floor};
use super::{AnyError, Client, QUIET, Row, ms, new_session, run_cmd, stats, verdict};

/// The gVisor row.
pub(super) async fn figure(
    docker: &DockerRuntime,
    n: usize,
    rows: &mut Vec<Row>,
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
    rows.push(measured?);
    Ok(())
}

async fn measure(client: &Client, n: usize) -> Result<Row, AnyError> {
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
        let profiled = i % 2 == 1;
        profile::record(profiled);
        let t = Instant::now();
        profile::mark("client: call sent");
        run_cmd(client, &sid, "true").await?;
        profile::mark("client: exit received");
        ours.push(t.elapsed());
        profile::record(false);
        if profiled {
            profiles.push(profile::take());
        }
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        get_session(client, &sid).await?;
        unary.push(t.elapsed());
    }
    floor.extend(spawn_floor(client, &sid).await?);
    super::close(client, sid).await?;
    let floor = median(&mut floor);
    let (o, u) = (stats(&ours), stats(&unary));
    eprintln!("{}", super::round_trip::stage_table(&profiles));
    let ratio = o.p50.as_secs_f64() / floor.as_secs_f64();
    Ok(Row {
        figure: "Under gVisor: RunCommand `true`, warm session (p50 / p90 / p99)".into(),
        ours: format!("{} / {} / {}", ms(o.p50), ms(o.p90), ms(o.p99)),
        baseline: format!(
            "spawn floor in the session's runsc container {}; GetSession {}",
            ms(floor),
            ms(u.p50)
        ),
        ratio: format!("{ratio:.2}x the floor"),
        target: verdict(ratio <= 1.5, "p50 <= 1.5x the runsc spawn floor"),
    })
}
