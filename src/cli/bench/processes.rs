//! Long-running processes: StartProcess answering once its process is
//! ready, against RunCommand of the same command in the same session
//! (alternating), and how fast the service takes a process's output and
//! hands it to a reader that follows it, against `docker exec` streaming
//! the same bytes.

use std::time::{Duration, Instant};

use sandboxd::pb;

use super::{
    AnyError, Client, QUIET, Row, close, docker_cli, ms, new_session, run_cmd, stats, verdict,
};

/// Bytes a flooding process writes for the throughput figure.
const FLOOD_BYTES: u64 = 256 << 20;

/// Starts `command` in `session`, ready on a line matching `ready`.
async fn start(
    client: &Client,
    session: &str,
    command: &str,
    ready: Option<&str>,
) -> Result<pb::StartProcessResponse, AnyError> {
    let req = pb::StartProcessRequest {
        session_id: session.into(),
        command: command.into(),
        ready: ready.map(|re| pb::Readiness {
            condition: Some(pb::readiness::Condition::OutputRegex(re.into())),
            timeout_ms: 30_000,
        }),
        ..Default::default()
    };
    Ok(client.clone().start_process(req).await?.into_inner())
}

async fn stop(client: &Client, session: &str, id: String) -> Result<pb::Process, AnyError> {
    let req = pb::StopProcessRequest {
        session_id: session.into(),
        process_id: id,
    };
    Ok(client
        .clone()
        .stop_process(req)
        .await?
        .into_inner()
        .process
        .unwrap_or_default())
}

/// Follows a process's output to its end: bytes read, bytes skipped.
async fn follow(client: &Client, session: &str, id: &str) -> Result<(u64, u64), AnyError> {
    let req = pb::ReadProcessOutputRequest {
        session_id: session.into(),
        process_id: id.into(),
        follow: true,
        ..Default::default()
    };
    let mut stream = client.clone().read_process_output(req).await?.into_inner();
    let (mut read, mut skipped) = (0, 0);
    while let Some(msg) = stream.message().await? {
        if let Some(pb::process_output::Kind::Chunk(c)) = msg.kind {
            read += c.data.len() as u64;
            skipped += c.skipped;
        }
    }
    Ok((read, skipped))
}

/// The process rows.
pub(super) async fn figures(
    client: &Client,
    n: usize,
    rows: &mut Vec<Row>,
) -> Result<(), AnyError> {
    eprintln!("processes: start until ready ({n} samples each), output throughput...");
    let session = new_session(client).await?;
    let sid = session.session_id.clone();
    let command = "echo ready; exec sleep 600";
    for _ in 0..3 {
        let p = start(client, &sid, command, Some("^ready$")).await?;
        stop(client, &sid, p.process.unwrap_or_default().process_id).await?;
        run_cmd(client, &sid, "echo ready").await?;
    }
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..n {
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        let p = start(client, &sid, command, Some("^ready$")).await?;
        ours.push(t.elapsed());
        if p.ready_state != pb::ReadyState::Ready as i32 {
            return Err(format!("a process was not ready: {p:?}").into());
        }
        stop(client, &sid, p.process.unwrap_or_default().process_id).await?;
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        run_cmd(client, &sid, "echo ready").await?;
        base.push(t.elapsed());
    }
    let (o, b) = (stats(&ours), stats(&base));
    let ratio = o.p50.as_secs_f64() / b.p50.as_secs_f64();
    rows.push(Row {
        figure: "StartProcess `echo ready; exec sleep 600` until ready (an output pattern)".into(),
        ours: format!("p50 {} p90 {} p99 {}", ms(o.p50), ms(o.p90), ms(o.p99)),
        baseline: format!("RunCommand `echo ready` p50 {}", ms(b.p50)),
        ratio: format!("{ratio:.2}x"),
        target: verdict(ratio <= 1.5, "<= 1.5x RunCommand"),
    });

    // Throughput: the service takes every byte (counted, its head and tail
    // kept) as fast as the process writes; a reader that follows gets
    // what it keeps up with. Against `docker exec` streaming the same
    // bytes to its client.
    let flood = format!("head -c {FLOOD_BYTES} /dev/zero");
    let container = session.container_id.clone();
    let (mut ingest, mut drain, mut followed) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        let p = start(client, &sid, &flood, None).await?;
        let id = p.process.unwrap_or_default().process_id;
        let (read, skipped) = follow(client, &sid, &id).await?;
        let took = t.elapsed();
        if read + skipped != FLOOD_BYTES {
            return Err(format!("{read} read and {skipped} skipped of {FLOOD_BYTES}").into());
        }
        ingest.push(took);
        followed.push(read as f64 / took.as_secs_f64());
        let (c, cmd) = (container.clone(), flood.clone());
        let t = Instant::now();
        tokio::task::spawn_blocking(move || docker_cli(&["exec", &c, "sh", "-c", &cmd])).await??;
        drain.push(t.elapsed());
    }
    let rate = |d: Duration| FLOOD_BYTES as f64 / (1 << 20) as f64 / d.as_secs_f64();
    let (i, d) = (rate(stats(&ingest).p50), rate(stats(&drain).p50));
    followed.sort_by(f64::total_cmp);
    rows.push(Row {
        figure: format!(
            "Process output, {} MiB: taken by the service (ReadProcessOutput following)",
            FLOOD_BYTES >> 20
        ),
        ours: format!(
            "{i:.0} MB/s taken, {:.0} MB/s read by the follower",
            followed[1] / (1 << 20) as f64
        ),
        baseline: format!("docker exec > /dev/null {d:.0} MB/s"),
        ratio: format!("{:.2}x", i / d),
        target: verdict(i >= 0.8 * d, ">= 0.8x docker exec"),
    });

    // Memory: a process flooding output nobody reads costs the service
    // its bounded buffer, not the output.
    let before = super::flood::peak_rss_kib();
    let p = start(
        client,
        &sid,
        &format!("head -c {} /dev/zero", 4 * FLOOD_BYTES),
        None,
    )
    .await?;
    let id = p.process.unwrap_or_default().process_id;
    let until = Instant::now() + Duration::from_secs(600);
    loop {
        let req = pb::ListProcessesRequest {
            session_id: sid.clone(),
        };
        let list = client.clone().list_processes(req).await?.into_inner();
        let me = list.processes.into_iter().find(|q| q.process_id == id);
        if me.is_none_or(|q| q.state != pb::ProcessState::Running as i32) || Instant::now() > until
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let growth = super::flood::peak_rss_kib().saturating_sub(before) / 1024;
    rows.push(Row {
        figure: format!(
            "Process output flood, {} MiB nobody reads: service peak RSS growth",
            (4 * FLOOD_BYTES) >> 20
        ),
        ours: format!("{growth} MiB"),
        baseline: String::new(),
        ratio: String::new(),
        target: verdict(growth <= 16, "<= 16 MiB"),
    });
    close(client, sid).await?;
    Ok(())
}
