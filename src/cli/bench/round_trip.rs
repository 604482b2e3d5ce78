//! The command round trip: RunCommand `true` in a warm session against the
//! service's own unary round trip (GetSession), the spawn floor of the
//! session's container, a raw Engine API exec and the `docker exec` CLI,
//! alternating; and where a RunCommand's time goes, from the marks the
//! service and the supervisor take along its path.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use sandboxd::pb;
use sandboxd::profile;
use sandboxd::sandbox::docker::DockerRuntime;

use super::{
    AnyError, Client, QUIET, Row, Section, Stats, close, docker_cli, ms, new_session, run_cmd,
    stats, verdict,
};

/// Spawns per batch of the floor loop, and batches per measurement.
const FLOOR_SPAWNS: usize = 200;
const FLOOR_BATCHES: usize = 7;

/// Spawns per batch of the paused floor (each after a [`QUIET`] pause).
const PAUSED_SPAWNS: usize = 60;

/// The round-trip rows, and the breakdown section.
pub(super) async fn round_trip(
    client: &Client,
    docker: &DockerRuntime,
    n: usize,
    rows: &mut Vec<Row>,
    sections: &mut Vec<Section>,
) -> Result<(), AnyError> {
    eprintln!("command round trip ({n} samples each)...");
    let session = new_session(client).await?;
    let sid = session.session_id.clone();
    let container = session.container_id.clone();
    for _ in 0..5 {
        run_cmd(client, &sid, "true").await?;
        get_session(client, &sid).await?;
        docker.raw_exec(&container, &["true"]).await?;
    }
    let mut floor = spawn_floor(client, &sid).await?;
    let mut paused = paused_floor(client, &sid).await?;
    let (mut ours, mut unary, mut raw, mut cli) = (vec![], vec![], vec![], vec![]);
    let mut profiles = Vec::new();
    for i in 0..n {
        // Ours and GetSession take turns going first: whichever comes
        // right after the Docker baselines below pays for what those left
        // behind (about 0.1 ms here), so each side pays it half the time.
        for ours_now in [i % 2 == 0, i % 2 == 1] {
            // Every sample, ours and the baselines' alike, starts on a
            // quiet machine: Docker finishes an exec's bookkeeping after it
            // returns, and that work would land on the next sample.
            tokio::time::sleep(QUIET).await;
            if !ours_now {
                let t = Instant::now();
                get_session(client, &sid).await?;
                unary.push(t.elapsed());
                continue;
            }
            // Every other sample of ours is profiled, as many going first
            // as second.
            timed_run(client, &sid, i % 4 >= 2, &mut ours, &mut profiles).await?;
        }
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        docker.raw_exec(&container, &["true"]).await?;
        raw.push(t.elapsed());
        if i % 4 == 0 {
            tokio::time::sleep(QUIET).await;
            let t = Instant::now();
            let c = container.clone();
            tokio::task::spawn_blocking(move || docker_cli(&["exec", &c, "true"])).await??;
            cli.push(t.elapsed());
        }
    }
    // Back to back, as the floor loop spawns: no pause, so no processor
    // on the path has gone idle in between.
    let (mut hot, mut hot_unary) = (vec![], vec![]);
    for _ in 0..n {
        let t = Instant::now();
        run_cmd(client, &sid, "true").await?;
        hot.push(t.elapsed());
        let t = Instant::now();
        get_session(client, &sid).await?;
        hot_unary.push(t.elapsed());
    }
    floor.extend(spawn_floor(client, &sid).await?);
    if let (Some(p), Some(more)) = (&mut paused, paused_floor(client, &sid).await?) {
        p.extend(more);
    }
    let floor = median(&mut floor);
    let (o, u, r, c) = (stats(&ours), stats(&unary), stats(&raw), stats(&cli));
    let (h, hu) = (stats(&hot), stats(&hot_unary));
    rows.push(against_floor("warm session (p50 / p90 / p99)", o, u, floor));
    rows.push(against_floor(
        "back to back (no pause between samples)",
        h,
        hu,
        floor,
    ));
    if let Some(paused) = paused {
        rows.push(against_paused_floor(o, u, stats(&paused), floor));
    }
    rows.push(Row {
        figure: "RunCommand `true` vs a raw Engine API exec".into(),
        ours: ms(o.p50),
        baseline: format!(
            "raw Engine API exec {} / {} / {}",
            ms(r.p50),
            ms(r.p90),
            ms(r.p99)
        ),
        ratio: format!("{:.3}x", o.p50.as_secs_f64() / r.p50.as_secs_f64()),
        target: String::new(),
    });
    rows.push(Row {
        figure: "RunCommand `true` vs `docker exec` CLI".into(),
        ours: ms(o.p50),
        baseline: format!("docker exec {} / {} / {}", ms(c.p50), ms(c.p90), ms(c.p99)),
        ratio: format!("{:.3}x", o.p50.as_secs_f64() / c.p50.as_secs_f64()),
        target: String::new(),
    });
    sections.push(breakdown(&profiles, o.p50, u.p50, floor));
    close(client, sid).await?;
    Ok(())
}

/// The row of RunCommand `true` samples `ours` against the budget of
/// GetSession's `unary` round trip plus 1.3x the spawn floor.
fn against_floor(how: &str, ours: Stats, unary: Stats, floor: Duration) -> Row {
    let budget = unary.p50 + floor.mul_f64(1.3);
    Row {
        figure: format!("RunCommand `true`, {how}"),
        ours: format!("{} / {} / {}", ms(ours.p50), ms(ours.p90), ms(ours.p99)),
        baseline: format!(
            "GetSession {} / {} / {}; spawn floor {}",
            ms(unary.p50),
            ms(unary.p90),
            ms(unary.p99),
            ms(floor)
        ),
        ratio: format!(
            "{:.2}x (GetSession + 1.3x floor = {})",
            ours.p50.as_secs_f64() / budget.as_secs_f64(),
            ms(budget)
        ),
        target: verdict(
            ours.p50 <= budget,
            "p50 <= GetSession p50 + 1.3x spawn floor",
        ),
    }
}

/// The round-trip row's samples against what the same spawn costs on its
/// own after the same pause: GetSession plus `/bin/sh -c true` started
/// (as the supervisor does, with a vfork-like clone) and waited for 25 ms
/// after the one before, in the session's container.
fn against_paused_floor(ours: Stats, unary: Stats, paused: Stats, floor: Duration) -> Row {
    let bare = unary.p50 + paused.p50;
    Row {
        figure: "RunCommand `true`, warm session, against a bare spawn after the same pause".into(),
        ours: ms(ours.p50),
        baseline: format!(
            "GetSession {} + `/bin/sh -c true` spawned after a 25 ms pause {} / {} / {} \
             ({:.2}x the back-to-back floor {}): {}",
            ms(unary.p50),
            ms(paused.p50),
            ms(paused.p90),
            ms(paused.p99),
            paused.p50.as_secs_f64() / floor.as_secs_f64(),
            ms(floor),
            ms(bare)
        ),
        ratio: format!(
            "{:.2}x ({} over it)",
            ours.p50.as_secs_f64() / bare.as_secs_f64(),
            ms(ours.p50.saturating_sub(bare))
        ),
        target: "for reference".into(),
    }
}

/// One RunCommand `true` sample, its time pushed on `ours`; with
/// `profiled`, its marks on `profiles` (every other sample is, so the
/// marks' own cost, a lock and a push each, shows against the plain ones).
pub(super) async fn timed_run(
    client: &Client,
    sid: &str,
    profiled: bool,
    ours: &mut Vec<Duration>,
    profiles: &mut Vec<Vec<(&'static str, u64)>>,
) -> Result<(), AnyError> {
    profile::record(profiled);
    let t = Instant::now();
    profile::mark("client: call sent");
    let ran = run_cmd(client, sid, "true").await;
    profile::mark("client: exit received");
    ours.push(t.elapsed());
    profile::record(false);
    if profiled {
        profiles.push(profile::take());
    }
    ran.map(drop)
}

pub(super) async fn get_session(client: &Client, sid: &str) -> Result<(), AnyError> {
    client
        .clone()
        .get_session(pb::GetSessionRequest {
            session_id: sid.to_string(),
        })
        .await?;
    Ok(())
}

/// Per-spawn times of `/bin/sh -c true`, spawned and waited for by a shell
/// loop inside the session's own container: what any command costs there
/// before sandboxd adds anything.
pub(super) async fn spawn_floor(client: &Client, sid: &str) -> Result<Vec<Duration>, AnyError> {
    let script = format!(
        "n={FLOOR_SPAWNS}; i=0; s=$(date +%s%N); \
         while [ $i -lt $n ]; do /bin/sh -c true; i=$((i+1)); done; \
         e=$(date +%s%N); echo $(((e-s)/n))"
    );
    let mut out = Vec::new();
    for _ in 0..FLOOR_BATCHES {
        tokio::time::sleep(QUIET).await;
        let exit = run_cmd(client, sid, &script).await?;
        let text = exit.stdout.map(|s| s.text).unwrap_or_default();
        let ns: u64 = text
            .trim()
            .parse()
            .map_err(|_| format!("the spawn floor loop printed {text:?}"))?;
        out.push(Duration::from_nanos(ns));
    }
    Ok(out)
}

/// Per-spawn times of `/bin/sh -c true` started with `posix_spawn` (a
/// vfork-like clone, as the supervisor's) and waited for by a Python loop
/// in the session's container, each after a [`QUIET`] pause, as every
/// round-trip sample comes; `None` where the image has no python3.
pub(super) async fn paused_floor(
    client: &Client,
    sid: &str,
) -> Result<Option<Vec<Duration>>, AnyError> {
    let script = format!(
        "command -v python3 >/dev/null || exit 0; exec python3 -c '\
import os, time
for _ in range({PAUSED_SPAWNS}):
    time.sleep({pause})
    t = time.perf_counter_ns()
    os.waitpid(os.posix_spawn(\"/bin/sh\", [\"/bin/sh\", \"-c\", \"true\"], os.environ), 0)
    print(time.perf_counter_ns() - t)'",
        pause = QUIET.as_secs_f64()
    );
    let exit = run_cmd(client, sid, &script).await?;
    let text = exit.stdout.map(|s| s.text).unwrap_or_default();
    let spawns = text
        .lines()
        .map(|l| l.trim().parse().map(Duration::from_nanos))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| format!("the paused spawn loop printed {text:?}"))?;
    Ok((!spawns.is_empty()).then_some(spawns))
}

pub(super) fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Where a RunCommand's time goes: for every stage marked along its path,
/// the median time from the client's send to it, and the step from the
/// stage before.
fn breakdown(
    profiles: &[Vec<(&'static str, u64)>],
    ours: Duration,
    unary: Duration,
    floor: Duration,
) -> Section {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Measured with the round-trip row, by `sandboxd bench --only round-trip`: every other \
         RunCommand `true` sample records named marks on the host's monotonic clock (the service's \
         own, and the supervisor's inside the container, which shares that clock and sends its \
         marks back in its exit frame). For each stage: the median time from the client's send \
         ({} samples), and the median step from the stage before it in the same sample. That run: \
         RunCommand p50 {}, GetSession p50 {}, spawn floor {} (`/bin/sh -c true` spawned and waited \
         for by a shell loop in the same container).\n",
        profiles.len(),
        ms(ours),
        ms(unary),
        ms(floor),
    );
    body.push_str(&stage_table(profiles));
    Section {
        heading: "Where a RunCommand's time goes".into(),
        body,
    }
}

/// The stages of `profiles` (each a sample's marks), as a Markdown table.
pub(super) fn stage_table(profiles: &[Vec<(&'static str, u64)>]) -> String {
    stage_table_from(profiles, "client: call sent")
}

/// [`stage_table`], its times from the stage `anchor` of each sample.
pub(super) fn stage_table_from(profiles: &[Vec<(&'static str, u64)>], anchor: &str) -> String {
    // Offsets from the anchor, per stage, over all samples.
    let mut at: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    let mut steps: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    for marks in profiles {
        let Some(&(_, t0)) = marks.iter().find(|m| m.0 == anchor) else {
            continue;
        };
        let mut marks = marks.clone();
        marks.sort_by_key(|m| m.1);
        let mut prev = t0;
        for (stage, ns) in marks {
            at.entry(stage).or_default().push(ns.saturating_sub(t0));
            steps
                .entry(stage)
                .or_default()
                .push(ns.saturating_sub(prev));
            prev = ns;
        }
    }
    let med = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let mut stages: Vec<(&'static str, u64, u64, usize)> = at
        .iter_mut()
        .map(|(stage, v)| {
            let n = v.len();
            let step = med(steps.get_mut(stage).expect("same stages"));
            (*stage, med(v), step, n)
        })
        .collect();
    stages.sort_by_key(|s| s.1);
    let us = |ns: u64| format!("{:.0} µs", ns as f64 / 1000.0);
    let mut body = String::new();
    let _ = writeln!(body, "| stage | reached at (median) | step (median) |");
    let _ = writeln!(body, "|---|---|---|");
    for (stage, at, step, n) in stages {
        let seen = if n < profiles.len() {
            format!(" (in {n} of {} samples)", profiles.len())
        } else {
            String::new()
        };
        let _ = writeln!(body, "| {stage}{seen} | {} | {} |", us(at), us(step));
    }
    body
}
