//! The environment figures: a cold build of a pytest environment (apt from
//! Debian's mirror) against `docker build --no-cache` of the same recipe, a
//! rebuild of an unchanged recipe against a fully layer-cached `docker
//! build`, and a session started over the environment (from its warm
//! pool) against one over the default image (from the default pool).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::pb;
use sandboxd::session::Registry;

use super::{AnyError, Client, Row, close, docker_cli, ms, run_cmd, stats};

/// The environment the figures build (its pool is configured by `run`).
pub const NAME: &str = "bench-pytest";

/// Tag of the baseline's own image.
const BASELINE_TAG: &str = "sandboxd-bench-baseline:latest";

/// The recipe: pytest from Debian. A step unique to the run keeps the
/// engine's layer cache from answering the apt step.
fn recipe() -> String {
    format!(
        "FROM sandboxd-default:latest\n\
         RUN echo {}\n\
         RUN apt-get update -q && apt-get install -y -q --no-install-recommends python3-pytest \\\n\
         \x20   && rm -rf /var/lib/apt/lists/*\n",
        uuid::Uuid::new_v4().simple()
    )
}

/// Builds `dockerfile` as [`NAME`]; whether it was a cache hit.
async fn build(client: &Client, dockerfile: &str) -> Result<bool, AnyError> {
    let mut events = client
        .clone()
        .build_environment(pb::BuildEnvironmentRequest {
            name: NAME.into(),
            dockerfile: dockerfile.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    while let Some(ev) = events.message().await? {
        if let Some(pb::build_environment_event::Event::Done(d)) = ev.event {
            return Ok(d.cached);
        }
    }
    Err("the build ended without a result".into())
}

/// `docker build` (the classic builder, as sandboxd's engine API call
/// uses) of `dockerfile` with an empty context.
async fn docker_build(dockerfile: &str, no_cache: bool) -> Result<(), AnyError> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("Dockerfile"), dockerfile)?;
    let path = dir.path().display().to_string();
    tokio::task::spawn_blocking(move || {
        let mut args = vec!["build", "-q", "-t", BASELINE_TAG];
        if no_cache {
            args.push("--no-cache");
        }
        args.push(&path);
        let status = std::process::Command::new("docker")
            .args(&args)
            .env("DOCKER_BUILDKIT", "0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(AnyError::from(format!("docker build failed: {status}")))
        }
    })
    .await?
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Runs the environment figures.
pub async fn figures(
    client: &Client,
    registry: &Arc<Registry>,
    pool_size: usize,
    n: usize,
    rows: &mut Vec<Row>,
) -> Result<(), AnyError> {
    eprintln!("environments: a cold build of each (about a minute)...");
    let dockerfile = recipe();
    let t = Instant::now();
    let cached = build(client, &dockerfile).await?;
    let cold = t.elapsed();
    if cached {
        return Err("the cold build was answered from the cache".into());
    }
    let t = Instant::now();
    docker_build(&dockerfile, true).await?;
    let baseline_cold = t.elapsed();
    rows.push(Row {
        figure: "BuildEnvironment, cold: pytest by apt from the default image (one sample)".into(),
        ours: secs(cold),
        baseline: format!("docker build --no-cache {}", secs(baseline_cold)),
        ratio: format!("{:.2}x", cold.as_secs_f64() / baseline_cold.as_secs_f64()),
        target: "for reference".into(),
    });

    // Each figure starts with both pools full (fills would steal the CPU).
    let wanted = pool_size;
    let settle = || async {
        let until = Instant::now() + Duration::from_secs(60);
        while (registry.environment_pool_ready(NAME) < wanted || registry.pool_ready() < wanted)
            && Instant::now() < until
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    settle().await;
    eprintln!("environments: rebuilds of an unchanged recipe ({n} samples each)...");
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        if !build(client, &dockerfile).await? {
            return Err("an unchanged recipe was built again".into());
        }
        ours.push(t.elapsed());
        let t = Instant::now();
        docker_build(&dockerfile, false).await?;
        theirs.push(t.elapsed());
    }
    let (o, b) = (stats(&ours), stats(&theirs));
    rows.push(Row {
        figure: "BuildEnvironment, unchanged recipe (cache hit)".into(),
        ours: format!("{} / {} / {}", ms(o.p50), ms(o.p90), ms(o.p99)),
        baseline: format!(
            "docker build, every layer cached {} / {} / {}",
            ms(b.p50),
            ms(b.p90),
            ms(b.p99)
        ),
        ratio: format!("{:.3}x", o.p50.as_secs_f64() / b.p50.as_secs_f64()),
        target: super::verdict(
            o.p50 <= Duration::from_millis(100),
            "p50 <= 100 ms (answered at once)",
        ),
    });

    eprintln!("environments: session starts from the pools ({n} samples each)...");
    let (mut over_env, mut over_default) = (Vec::new(), Vec::new());
    for _ in 0..n {
        settle().await;
        let t = Instant::now();
        let s = client
            .clone()
            .create_session(pb::CreateSessionRequest {
                environment: NAME.into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        run_cmd(client, &s.session_id, "true").await?;
        over_env.push(t.elapsed());
        close(client, s.session_id).await?;
        settle().await;
        let t = Instant::now();
        let s = client
            .clone()
            .create_session(pb::CreateSessionRequest::default())
            .await?
            .into_inner();
        run_cmd(client, &s.session_id, "true").await?;
        over_default.push(t.elapsed());
        close(client, s.session_id).await?;
    }
    let (e, d) = (stats(&over_env), stats(&over_default));
    let ratio = e.p50.as_secs_f64() / d.p50.as_secs_f64();
    rows.push(Row {
        figure: "CreateSession until a first command ran, over an environment (its pool)".into(),
        ours: format!("{} / {} / {}", ms(e.p50), ms(e.p90), ms(e.p99)),
        baseline: format!(
            "default image, default pool {} / {} / {}",
            ms(d.p50),
            ms(d.p90),
            ms(d.p99)
        ),
        ratio: format!("{ratio:.2}x"),
        target: super::verdict(ratio <= 1.5, "as fast as default sessions (<= 1.5x)"),
    });

    client
        .clone()
        .delete_environment(pb::DeleteEnvironmentRequest { name: NAME.into() })
        .await?;
    let _ = docker_cli(&["rmi", BASELINE_TAG]);
    Ok(())
}
