//! The cost of durable sessions and of the metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::session::defaults;

use super::{AnyError, QUIET, Row, close, ms, new_session, run_cmd, stats, verdict};

/// The cost of durable sessions (each recorded in the state directory, its
/// journal in a file) and of the metrics, A/B in the same run: two services
/// set up alike but for those, their samples alternating.
pub(super) async fn durability(n: usize, rows: &mut Vec<Row>) -> Result<(), AnyError> {
    eprintln!("durable sessions and metrics vs neither ({n} samples each)...");
    let pool_size = defaults::POOL_SIZE;
    let plain = sandboxd::local::Local::start("bench-plain", pool_size, |_| {}).await?;
    let durable = match sandboxd::local::Local::start("bench-durable", pool_size, |c| {
        c.durable = true;
        c.metrics = Some(Arc::new(sandboxd::metrics::Metrics::new()));
    })
    .await
    {
        Ok(durable) => durable,
        Err(e) => {
            plain.stop().await?;
            return Err(e.into());
        }
    };
    let result = async {
        let services = [
            (&plain.client, &plain.registry),
            (&durable.client, &durable.registry),
        ];
        let settle = || async {
            let until = Instant::now() + Duration::from_secs(60);
            while services.iter().any(|(_, r)| r.pool_ready() < pool_size) && Instant::now() < until
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        settle().await;
        let sessions = [
            new_session(services[0].0).await?,
            new_session(services[1].0).await?,
        ];
        for (i, (client, _)) in services.iter().enumerate() {
            for _ in 0..5 {
                run_cmd(client, &sessions[i].session_id, "true").await?;
            }
        }
        let mut runs = [Vec::new(), Vec::new()];
        for k in 0..n {
            // Alternate which goes first, so neither always follows the other.
            for j in 0..2 {
                let i = (k + j) % 2;
                tokio::time::sleep(QUIET).await;
                let t = Instant::now();
                run_cmd(services[i].0, &sessions[i].session_id, "true").await?;
                runs[i].push(t.elapsed());
            }
        }
        let mut starts = [Vec::new(), Vec::new()];
        for k in 0..(n / 5).max(10) {
            settle().await;
            for j in 0..2 {
                let i = (k + j) % 2;
                tokio::time::sleep(QUIET).await;
                let t = Instant::now();
                let s = new_session(services[i].0).await?;
                starts[i].push(t.elapsed());
                close(services[i].0, s.session_id).await?;
            }
        }
        for (i, (client, _)) in services.iter().enumerate() {
            close(client, sessions[i].session_id.clone()).await?;
        }
        Ok::<_, AnyError>((runs, starts))
    }
    .await;
    durable.stop().await?;
    plain.stop().await?;
    let (runs, starts) = result?;
    for (figure, samples) in [
        (
            "RunCommand `true`, warm session, with durable sessions and metrics",
            &runs,
        ),
        (
            "CreateSession from the pool, with durable sessions and metrics",
            &starts,
        ),
    ] {
        let (base, on) = (stats(&samples[0]), stats(&samples[1]));
        let ratio = on.p50.as_secs_f64() / base.p50.as_secs_f64();
        rows.push(Row {
            figure: figure.into(),
            ours: format!("{} / {} / {}", ms(on.p50), ms(on.p90), ms(on.p99)),
            baseline: format!(
                "neither (same run) {} / {} / {}",
                ms(base.p50),
                ms(base.p90),
                ms(base.p99)
            ),
            ratio: format!("{ratio:.3}x"),
            target: verdict(ratio <= 1.05, "p50 within 5% of neither"),
        });
    }
    Ok(())
}
